#include "gui/rank_view.hpp"

#include <QGraphicsItem>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QSignalBlocker>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

namespace zerolens::gui {

RankView::RankView(Session& session, QWidget* parent) : QGraphicsView(parent), session_(session) {
  scene_.setItemIndexMethod(QGraphicsScene::NoIndex);  // rebuilt at every step
  setScene(&scene_);
  setRenderHint(QPainter::Antialiasing);
  setBackgroundBrush(Qt::white);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  connect(&session_, &Session::planChanged, this, &RankView::request_rebuild);
  connect(&session_, &Session::stepChanged, this, &RankView::request_rebuild);
  connect(&session_, &Session::rankChanged, this, &RankView::request_rebuild);
}

void RankView::request_rebuild() {
  if (isVisible()) {
    rebuild();
  } else {
    dirty_ = true;
  }
}

void RankView::showEvent(QShowEvent* event) {
  QGraphicsView::showEvent(event);
  if (dirty_) rebuild();
}

void RankView::set_options(const RankViewOptions& options) {
  const double bar_height = options_.bar_height;  // the window's shape decides it
  options_ = options;
  options_.bar_height = bar_height;
  request_rebuild();
}

void RankView::rebuild() {
  dirty_ = false;
  const Planned* planned = session_.planned();
  if (!planned) {
    scene_.clear();
    return;
  }
  layout_ = build_rank_scene(scene_, *planned, session_.step(), session_.selected_rank(), options_);
  // Taller bars when the window is taller than the scene, so the drawing fills it.
  const QRectF frame = scene_.sceneRect();
  const double wanted = frame.width() * viewport()->height() / std::max(1, viewport()->width());
  const double bar = std::clamp(options_.bar_height + wanted - frame.height(), 260.0, 1400.0);
  if (std::abs(bar - options_.bar_height) > 4) {
    options_.bar_height = bar;
    layout_ =
        build_rank_scene(scene_, *planned, session_.step(), session_.selected_rank(), options_);
  }
  fitInView(scene_.sceneRect(), Qt::KeepAspectRatio);
}

void RankView::resizeEvent(QResizeEvent* event) {
  QGraphicsView::resizeEvent(event);
  request_rebuild();
}

void RankView::mousePressEvent(QMouseEvent* event) {
  for (QGraphicsItem* item : items(event->position().toPoint())) {
    if (item->data(item_key::Role).toInt() == int(ItemRole::Column)) {
      session_.select_rank(item->data(item_key::Rank).toInt());
      return;
    }
  }
  QGraphicsView::mousePressEvent(event);
}

RankPage::RankPage(Session& session, QWidget* parent) : QWidget(parent) {
  view_ = new RankView(session, this);
  show_ = new QComboBox(this);
  show_->addItems({"all memory", "model states and their transient copies", "model states only"});
  show_->setToolTip(
      "Which memory the columns stack (model states: parameters, gradients, fp32 copies, optimizer "
      "states)");
  scale_ = new QComboBox(this);
  scale_->addItems({"to the device's capacity", "to the step's peak"});
  scale_->setToolTip(
      "Bar height: the device's capacity, or the highest memory this view reaches in the step");
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel("Show:", this));
  controls->addWidget(show_);
  controls->addSpacing(16);
  controls->addWidget(new QLabel("Scale bars:", this));
  controls->addWidget(scale_);
  controls->addStretch();
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(controls);
  layout->addWidget(view_, 1);
  connect(show_, &QComboBox::currentIndexChanged, this, &RankPage::read_controls);
  connect(scale_, &QComboBox::currentIndexChanged, this, &RankPage::read_controls);
}

void RankPage::set_options(const RankViewOptions& options) {
  const QSignalBlocker block_show(show_), block_scale(scale_);
  show_->setCurrentIndex(int(options.show));
  scale_->setCurrentIndex(int(options.scale));
  view_->set_options(options);
}

void RankPage::read_controls() {
  RankViewOptions options = view_->options();
  options.show = ShowMemory(show_->currentIndex());
  options.scale = ScaleMode(scale_->currentIndex());
  view_->set_options(options);
}

}  // namespace zerolens::gui
