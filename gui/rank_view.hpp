#pragma once
// The rank view: the scene of rank_scene.hpp in a view that fits the window, with the choice of
// what to show and how to scale. Clicking a column selects its rank.
#include <QComboBox>
#include <QGraphicsScene>
#include <QGraphicsView>
#include <QWidget>

#include "gui/rank_scene.hpp"
#include "gui/session.hpp"

namespace zerolens::gui {

class RankView : public QGraphicsView {
  Q_OBJECT

 public:
  explicit RankView(Session& session, QWidget* parent = nullptr);
  const RankLayout& layout() const { return layout_; }
  const RankViewOptions& options() const { return options_; }
  void set_options(const RankViewOptions& options);
  void rebuild();
  // Rebuilds now when shown, else when next shown.
  void request_rebuild();

 protected:
  void resizeEvent(QResizeEvent* event) override;
  void showEvent(QShowEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;

 private:
  Session& session_;
  QGraphicsScene scene_;
  RankLayout layout_;
  RankViewOptions options_;
  bool dirty_ = true;
};

class RankPage : public QWidget {
  Q_OBJECT

 public:
  explicit RankPage(Session& session, QWidget* parent = nullptr);
  RankView& view() { return *view_; }
  void set_options(const RankViewOptions& options);

 private:
  void read_controls();
  RankView* view_;
  QComboBox* show_;
  QComboBox* scale_;
};

}  // namespace zerolens::gui
