#pragma once
// The timeline view: the Gantt chart of the predicted trace (or a loaded one), zoom (buttons,
// Ctrl+wheel) and pan (drag, scroll bars), the step cursor drawn on it and moved by a click on an
// op.
#include <QComboBox>
#include <QGraphicsScene>
#include <QGraphicsView>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QWidget>

#include "gui/session.hpp"
#include "gui/timeline_scene.hpp"

namespace zerolens::gui {

class TimelineView : public QGraphicsView {
  Q_OBJECT

 public:
  explicit TimelineView(Session& session, QWidget* parent = nullptr);
  void zoom(double factor);
  void fit();
  void set_use_loaded(bool use_loaded);
  const TimelineItems& timeline_items() const { return items_; }
  const Trace* shown_trace() const;
  double zoom_factor() const { return zoom_; }
  int max_ranks() const { return max_ranks_; }
  void set_max_ranks(int ranks);
  // Ops whose kind or layer contains `text` (case-insensitive) stay; the others fade ("" shows
  // all).
  void set_filter(const QString& text);
  const QString& filter() const { return filter_; }
  // The schedule indices of the ops the filter keeps, in order (none while it is empty).
  const std::vector<std::int64_t>& matches() const { return matches_; }
  // The first match after op `after` (wrapping around), or -1.
  std::int64_t next_match(std::int64_t after) const;
  // Rebuilds now when shown, else when next shown.
  void request_rebuild();

 signals:
  void matchesChanged();  // the filter's matches were worked out again

 protected:
  void mousePressEvent(QMouseEvent* event) override;
  // Perfetto's keys: W/S zoom in/out around the centre, A/D pan left/right.
  void keyPressEvent(QKeyEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void showEvent(QShowEvent* event) override;

 private:
  void rebuild();
  void show_step();
  void apply_filter();
  void pin_labels();  // the row labels at the left edge of what is shown
  Session& session_;
  QGraphicsScene scene_;
  TimelineItems items_;
  double zoom_ = 1;
  bool use_loaded_ = true;
  int max_ranks_ = 1;  // a predicted trace's ranks are identical: one stands for all
  QString filter_;
  std::vector<std::int64_t> matches_;
  bool dirty_ = true;
  int built_width_ = 0;  // viewport width of the last rebuild
  std::vector<QGraphicsRectItem*> highlighted_;
};

class TimelinePage : public QWidget {
  Q_OBJECT

 public:
  explicit TimelinePage(Session& session, QWidget* parent = nullptr);
  TimelineView& view() { return *view_; }
  QSpinBox& ranks() { return *ranks_; }
  QLineEdit& filter() { return *filter_; }
  const QLabel& legend() const { return *legend_; }
  const QLabel& filter_matches() const { return *matches_; }

 private:
  void sync_source();
  void show_matches();
  Session& session_;
  TimelineView* view_;
  QComboBox* source_;
  QSpinBox* ranks_;
  QLineEdit* filter_;
  QLabel* matches_;  // how many ops the filter keeps
  QLabel* summary_;
  QLabel* legend_;
};

}  // namespace zerolens::gui
