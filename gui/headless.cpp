#include "gui/headless.hpp"

#include <QApplication>
#include <iostream>

#include "gui/image_export.hpp"

namespace zerolens::gui {
namespace {

void check_plan(const Session& session) {
  if (!session.error().isEmpty())
    throw InputError("", "cannot plan: " + session.error().toStdString());
}

void set_step(Session& session, std::int64_t step) {
  if (step >= session.op_count()) {
    throw InputError("--step", "must be between 0 (before the first op) and " +
                                   std::to_string(session.op_count()) + " (the schedule has " +
                                   std::to_string(session.op_count()) + " ops)");
  }
  session.set_step(step);
}

}  // namespace

void prepare_window(MainWindow& window, const CommandLine& line) {
  check_plan(window.session());
  if (line.trace && !window.open_trace_file(QString::fromStdString(*line.trace))) {
    throw InputError("--trace", window.last_error().toStdString());
  }
  RankViewOptions options = window.ranks().view().options();
  if (line.show) options.show = *line.show;
  if (line.scale) options.scale = *line.scale;
  window.ranks().set_options(options);
  window.memory().set_scale(options.scale);
  window.memory().set_show(options.show);
  place_cursor(window, line);
  window.resize(line.size);
  window.show_view(line.view);
}

void place_cursor(MainWindow& window, const CommandLine& line) {
  if (line.rank) {
    if (*line.rank >= window.session().world_size())
      throw InputError("--rank", "must be between 0 and " +
                                     std::to_string(window.session().world_size() - 1) +
                                     " (the ranks the views draw)");
    window.session().select_rank(*line.rank);
  }
  if (line.step) set_step(window.session(), *line.step);
  if (line.seed_step && !window.step_bar().show_seed_step(*line.seed_step))
    throw InputError("--seed-step",
                     "the seed walkthrough's steps need a ZeRO-3 schedule that gathers and "
                     "releases each layer in forward and reduce-scatters gradients in backward, in "
                     "the seed's order (--walkthrough plans one); this plan's schedule has no "
                     "such moments");
}

int render_screenshot(const CommandLine& line) {
  MainWindow window(line.settings, false);
  prepare_window(window, line);
  window.show();
  QApplication::processEvents();
  export_widget(window, QString::fromStdString(*line.screenshot));
  std::cout << "zerolens-gui: wrote " << *line.screenshot << " (" << to_string(line.view)
            << " view, " << window.width() << "x" << window.height() << ", cursor "
            << (line.seed_step ? "seed step " + std::to_string(*line.seed_step) + ", " : "")
            << (window.session().step() < 0
                    ? std::string("before the first op")
                    : "on op " + std::to_string(window.session().step() + 1))
            << " of " << window.session().op_count() << ")\n";
  return 0;
}

}  // namespace zerolens::gui
