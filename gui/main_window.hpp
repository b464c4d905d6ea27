#pragma once
// The main window: the config panel on the left, the views in tabs (ranks, timeline, memory,
// traffic, compare) with the step cursor under them, and the File menu (configs, traces, Chrome
// export, images). File errors go to a dialog that names the problem, or are only recorded when
// dialogs are off (headless rendering, tests).
#include <QMainWindow>
#include <QTabWidget>
#include <optional>
#include <string>

#include "gui/compare_chart.hpp"
#include "gui/config_panel.hpp"
#include "gui/memory_chart.hpp"
#include "gui/rank_view.hpp"
#include "gui/session.hpp"
#include "gui/step_bar.hpp"
#include "gui/timeline_view.hpp"
#include "gui/traffic_chart.hpp"

namespace zerolens::gui {

enum class View { Ranks, Timeline, Memory, Traffic, Compare };
inline constexpr int kViewCount = 5;
const char* to_string(View view);
std::optional<View> parse_view(const std::string& name);

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  MainWindow(Settings settings, bool dialogs, QWidget* parent = nullptr);

  Session& session() { return session_; }
  ConfigPanel& config_panel() { return *config_; }
  RankPage& ranks() { return *ranks_; }
  TimelinePage& timeline() { return *timeline_; }
  MemoryPage& memory() { return *memory_; }
  TrafficPage& traffic() { return *traffic_; }
  ComparePage& compare() { return *compare_; }
  StepBar& step_bar() { return *step_bar_; }
  QWidget& view_widget(View view);
  void show_view(View view);

  // Each returns false, with the problem reported, when it fails.
  bool open_config_file(const QString& path);
  bool save_config_file(const QString& path);
  bool export_deepspeed_config(const QString& path);
  bool open_trace_file(const QString& path);
  bool save_trace_file(const QString& path);
  bool export_chrome_trace(const QString& path);
  bool export_view(View view, const QString& path);
  void load_settings(Settings settings);
  const QString& last_error() const { return last_error_; }

 private:
  void make_menus();
  void make_file_menu();
  void report_error(const QString& message);
  void tell(const QString& message);  // a passing note in the status bar
  void apply_view_defaults();
  void update_title();
  const Trace* shown_trace() const;
  template <typename Action>
  bool attempt(const QString& what, Action action);

  Session session_;
  bool dialogs_;
  QString last_error_;
  ConfigPanel* config_;
  QTabWidget* tabs_;
  RankPage* ranks_;
  TimelinePage* timeline_;
  MemoryPage* memory_;
  TrafficPage* traffic_;
  ComparePage* compare_;
  StepBar* step_bar_;
};

}  // namespace zerolens::gui
