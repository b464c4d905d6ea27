#include "gui/app.hpp"

#include <QApplication>
#include <iostream>

#include "gui/command_line.hpp"
#include "gui/headless.hpp"

namespace zerolens::gui {
namespace {

constexpr int kExitOk = 0, kExitInvalid = 2, kExitInternal = 3;

// The offscreen platform reports what it cannot do for windows (size hints) and where it keeps
// runtime files; neither matters for a screenshot, everything else is passed on.
void quiet_offscreen_notes(QtMsgType type, const QMessageLogContext& context, const QString& message) {
  if (message.contains("propagateSizeHints") || message.contains("XDG_RUNTIME_DIR")) return;
  std::cerr << qPrintable(qFormatLogMessage(type, context, message)) << '\n';
}

int run_window(const CommandLine& line) {
  MainWindow window(line.settings, true);
  if (line.trace) window.open_trace_file(QString::fromStdString(*line.trace));
  if (window.session().planned()) place_cursor(window, line);
  window.show_view(line.view);
  window.resize(line.size);
  window.show();
  return QApplication::exec();
}

bool has_display() {
  return !qEnvironmentVariableIsEmpty("DISPLAY") || !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") ||
         !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
}

}  // namespace

int run_app(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::cout << usage();
    return kExitOk;
  }
  if (!wants_screenshot(argc, argv) && !has_display()) {
    std::cerr << "zerolens-gui: no display (DISPLAY is not set). Render to a file with --screenshot FILE, or set "
                 "QT_QPA_PLATFORM=offscreen.\n";
    return kExitInvalid;
  }
  // A screenshot needs no display: use the offscreen platform unless one was chosen.
  if (wants_screenshot(argc, argv)) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    qInstallMessageHandler(quiet_offscreen_notes);
  }
  QApplication app(argc, argv);
  QApplication::setApplicationName("zerolens-gui");
  try {
    const CommandLine line = parse_command_line(QApplication::arguments());
    return line.screenshot ? render_screenshot(line) : run_window(line);
  } catch (const InputError& error) {
    std::cerr << "zerolens-gui: " << error.what() << '\n';
    return kExitInvalid;
  } catch (const std::exception& error) {
    std::cerr << "zerolens-gui: internal error: " << error.what() << '\n';
    return kExitInternal;
  }
}

}  // namespace zerolens::gui
