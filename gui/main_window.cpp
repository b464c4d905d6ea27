#include "gui/main_window.hpp"

#include <QFileDialog>
#include <QMenuBar>
#include <QMessageBox>
#include <QScrollArea>
#include <QSplitter>
#include <QStatusBar>
#include <QVBoxLayout>

#include "gui/config_file.hpp"
#include "gui/image_export.hpp"
#include "sim/config/deepspeed_json.hpp"
#include "sim/trace/chrome_trace.hpp"

namespace zerolens::gui {
namespace {

const char* const kViewNames[kViewCount] = {"ranks", "timeline", "memory", "traffic", "compare"};
const char* const kViewTitles[kViewCount] = {"Ranks", "Timeline", "Memory", "Traffic", "Compare"};

QString save_path(QWidget* parent, const QString& title, const QString& filter) {
  return QFileDialog::getSaveFileName(parent, title, {}, filter);
}

QString open_path(QWidget* parent, const QString& title) {
  return QFileDialog::getOpenFileName(parent, title, {}, "JSON (*.json);;All files (*)");
}

}  // namespace

const char* to_string(View view) {
  return kViewNames[int(view)];
}

std::optional<View> parse_view(const std::string& name) {
  for (int v = 0; v < kViewCount; ++v) {
    if (name == kViewNames[v]) return View(v);
  }
  return std::nullopt;
}

MainWindow::MainWindow(Settings settings, bool dialogs, QWidget* parent)
    : QMainWindow(parent), session_(settings), dialogs_(dialogs) {
  config_ = new ConfigPanel(
      session_, [this](const QString& message) { report_error(message); }, this);
  tabs_ = new QTabWidget(this);
  ranks_ = new RankPage(session_, tabs_);
  timeline_ = new TimelinePage(session_, tabs_);
  memory_ = new MemoryPage(session_, tabs_);
  traffic_ = new TrafficPage(session_, tabs_);
  compare_ = new ComparePage(session_, tabs_);
  for (int v = 0; v < kViewCount; ++v) tabs_->addTab(&view_widget(View(v)), kViewTitles[v]);
  step_bar_ = new StepBar(session_, this);
  step_bar_->install_shortcuts(*this);
  auto* right = new QWidget(this);
  auto* right_layout = new QVBoxLayout(right);
  right_layout->setContentsMargins(0, 0, 0, 0);
  right_layout->addWidget(tabs_, 1);
  right_layout->addWidget(step_bar_);
  auto* scroll = new QScrollArea(this);
  scroll->setWidget(config_);
  scroll->setWidgetResizable(true);
  scroll->setMinimumWidth(330);
  auto* splitter = new QSplitter(this);
  splitter->addWidget(scroll);
  splitter->addWidget(right);
  splitter->setStretchFactor(1, 1);
  setCentralWidget(splitter);
  make_menus();
  connect(config_, &ConfigPanel::walkthroughRequested, this,
          [this] { load_settings(walkthrough_settings()); });
  connect(config_, &ConfigPanel::defaultsRequested, this,
          [this] { load_settings(default_settings()); });
  connect(&session_, &Session::planChanged, this, &MainWindow::update_title);
  load_settings(std::move(settings));
}

QWidget& MainWindow::view_widget(View view) {
  switch (view) {
    case View::Ranks:
      return *ranks_;
    case View::Timeline:
      return *timeline_;
    case View::Memory:
      return *memory_;
    case View::Traffic:
      return *traffic_;
    case View::Compare:
      return *compare_;
  }
  return *ranks_;
}

void MainWindow::show_view(View view) {
  tabs_->setCurrentIndex(int(view));
  if (view == View::Compare) compare_->ensure_computed();
}

void MainWindow::load_settings(Settings settings) {
  session_.clear_trace();
  session_.apply(std::move(settings));
  apply_view_defaults();
  session_.set_step(-1);
}

void MainWindow::apply_view_defaults() {
  const bool walkthrough = session_.settings().walkthrough;
  RankViewOptions options;
  options.show = walkthrough ? ShowMemory::StatesAndCopies : ShowMemory::All;
  // Bars zoomed to the step's peak so the blocks read (the capacity is still marked); the memory
  // chart shows the capacity line unless the step uses under 5% of it (the walkthrough, a tiny
  // model's measured trace), where a line on the floor would tell nothing.
  options.scale = ScaleMode::Peak;
  ranks_->set_options(options);
  const Planned* planned = session_.planned();
  const bool tiny = planned && planned->plan.device(Device::Gpu).peak_per_rank <
                                   planned->plan.device(Device::Gpu).capacity / 20;
  memory_->set_scale(walkthrough || tiny ? ScaleMode::Peak : ScaleMode::Capacity);
  memory_->set_show(options.show);  // as the rank view: the walkthrough's states and copies
}

void MainWindow::update_title() {
  const Planned* planned = session_.planned();
  if (!planned) return;
  const auto& c = planned->plan.schedule.context;
  QString parallel;
  if (c.tensor_parallel > 1) parallel += QString("tensor parallel %1 x ").arg(c.tensor_parallel);
  if (c.pipeline_parallel > 1)
    parallel +=
        QString("pipeline %1 (stage %2 shown) x ").arg(c.pipeline_parallel).arg(c.pipeline_stage);
  if (!parallel.isEmpty()) parallel = " (" + parallel + QString("data parallel %1)").arg(c.dp_size);
  setWindowTitle(QString("zerolens-gui: %1 on %2 x %3%4, ZeRO stage %5")
                     .arg(QString::fromStdString(planned->plan.request.model.name))
                     .arg(session_.job_gpus())
                     .arg(QString::fromStdString(planned->plan.request.cluster.gpu.name))
                     .arg(parallel)
                     .arg(c.stage));
}

void MainWindow::tell(const QString& message) {
  statusBar()->showMessage(message, 15000);
}

void MainWindow::report_error(const QString& message) {
  last_error_ = message;
  if (dialogs_) QMessageBox::warning(this, "zerolens-gui", message);
}

template <typename Action>
bool MainWindow::attempt(const QString& what, Action action) {
  try {
    action();
    return true;
  } catch (const std::exception& error) {
    report_error(QString("%1: %2").arg(what, error.what()));
    return false;
  }
}

bool MainWindow::open_config_file(const QString& path) {
  return attempt("Cannot open the config", [&] {
    Diagnostics diagnostics;
    Settings settings = read_config_file(path.toStdString(), session_.settings(), diagnostics);
    plan_settings(settings);  // throws when it cannot be planned; the current plan stays
    load_settings(std::move(settings));
    QString message = "Opened " + path;
    for (const auto& warning : diagnostics.warnings)
      message += "; warning: " + QString::fromStdString(warning);
    tell(message);
  });
}

bool MainWindow::save_config_file(const QString& path) {
  return attempt("Cannot save the config", [&] {
    write_text_file(path.toStdString(), settings_to_json(session_.settings()).dump(2) + "\n");
    tell("Saved the config to " + path);
  });
}

bool MainWindow::export_deepspeed_config(const QString& path) {
  return attempt("Cannot export the DeepSpeed config", [&] {
    write_text_file(path.toStdString(),
                    to_deepspeed_json(session_.settings().config).dump(2) + "\n");
    tell("Wrote the DeepSpeed config to " + path);
  });
}

bool MainWindow::open_trace_file(const QString& path) {
  return attempt("Cannot open the trace", [&] {
    session_.load_trace(read_trace_file(path.toStdString()), path.toStdString());
    apply_view_defaults();
    show_view(View::Timeline);  // where the trace itself is drawn (and on the memory chart)
    tell("Opened " + path + ": its run is planned, the trace is on the Timeline and Memory tabs");
  });
}

const Trace* MainWindow::shown_trace() const {
  if (session_.loaded()) return &session_.loaded()->trace;
  return session_.planned() ? &session_.planned()->predicted : nullptr;
}

bool MainWindow::save_trace_file(const QString& path) {
  return attempt("Cannot save the trace", [&] {
    if (!session_.planned()) throw InputError("trace", "nothing is planned");
    write_text_file(path.toStdString(),
                    trace_to_json(session_.planned()->predicted).dump(1) + "\n");
    tell("Saved the predicted trace to " + path);
  });
}

bool MainWindow::export_chrome_trace(const QString& path) {
  return attempt("Cannot export the Chrome trace", [&] {
    const Trace* trace = shown_trace();
    if (!trace) throw InputError("trace", "nothing is planned");
    write_text_file(path.toStdString(), chrome_trace_json(*trace).dump() + "\n");
    tell("Wrote the Chrome trace to " + path + " (open it in https://ui.perfetto.dev)");
  });
}

bool MainWindow::export_view(View view, const QString& path) {
  return attempt("Cannot export the view", [&] {
    show_view(view);
    export_widget(view_widget(view), path);
    tell("Wrote " + path);
  });
}

void MainWindow::make_menus() {
  make_file_menu();
  QMenu* examples = menuBar()->addMenu("&Examples");
  examples->addAction("4-GPU ZeRO-3 walkthrough", this,
                      [this] { load_settings(walkthrough_settings()); });
  examples->addAction("GPT-2 1.5B on 8 x A100-40GB, ZeRO-3 + CPU offload", this,
                      [this] { load_settings(default_settings()); });
  QMenu* help = menuBar()->addMenu("&Help");
  help->addAction("Keys", this, [this] {
    QMessageBox::information(
        this, "Keys",
        "\u2190 / \u2192  previous / next op\nPage Up / Page Down  10 ops\nHome / End  before the "
        "first op / last op\nShift + \u2190 / \u2192  previous / next step of the seed's walkthrough\n"
        "Space  play / pause\nCtrl + wheel or W / S on the timeline  zoom\nA / D  pan\n"
        "Click an op on the timeline  move the cursor there\nClick a rank column  describe as that "
        "rank");
  });
}

void MainWindow::make_file_menu() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("Open config (zerolens or DeepSpeed)...", QKeySequence::Open, this, [this] {
    const QString path = open_path(this, "Open a config");
    if (!path.isEmpty()) open_config_file(path);
  });
  file->addAction("Save config...", QKeySequence::Save, this, [this] {
    const QString path = save_path(this, "Save the config", "JSON (*.json)");
    if (!path.isEmpty()) save_config_file(path);
  });
  file->addAction("Export DeepSpeed config...", this, [this] {
    const QString path = save_path(this, "Export the DeepSpeed config", "JSON (*.json)");
    if (!path.isEmpty()) export_deepspeed_config(path);
  });
  file->addSeparator();
  file->addAction("Open trace (predicted or measured)...", QKeySequence(Qt::CTRL | Qt::Key_T), this, [this] {
    const QString path = open_path(this, "Open a trace (zerolens trace -o, or a measured trace)");
    if (!path.isEmpty()) open_trace_file(path);
  });
  file->addAction("Close trace", this, [this] { session_.clear_trace(); });
  file->addAction("Save predicted trace...", this, [this] {
    const QString path = save_path(this, "Save the predicted trace", "JSON (*.json)");
    if (!path.isEmpty()) save_trace_file(path);
  });
  file->addAction("Export Chrome trace (Perfetto)...", this, [this] {
    const QString path = save_path(this, "Export a Chrome trace", "JSON (*.json)");
    if (!path.isEmpty()) export_chrome_trace(path);
  });
  file->addSeparator();
  file->addAction("Export this view as PNG or SVG...", this, [this] {
    const QString path = save_path(this, "Export the view", "PNG (*.png);;SVG (*.svg)");
    if (!path.isEmpty()) export_view(View(tabs_->currentIndex()), path);
  });
  file->addSeparator();
  file->addAction("Quit", QKeySequence::Quit, this, &QWidget::close);
}

}  // namespace zerolens::gui
