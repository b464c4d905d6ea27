#pragma once
// The step cursor: a slider over the schedule's ops, play/pause with a speed, step back/forward,
// jumps to the walkthrough's key moments, and the current op in words.
#include <QComboBox>
#include <QLabel>
#include <QSlider>
#include <QTimer>
#include <QToolButton>
#include <QWidget>

#include "gui/moments.hpp"
#include "gui/session.hpp"

namespace zerolens::gui {

class StepBar : public QWidget {
  Q_OBJECT

 public:
  explicit StepBar(Session& session, QWidget* parent = nullptr);
  // Left/Right, PageUp/PageDown, Home/End and Space on `window`.
  void install_shortcuts(QWidget& window);
  void step_by(std::int64_t delta);
  void jump_to(Moment moment);
  void toggle_play();
  bool playing() const { return timer_.isActive(); }
  QSlider& slider() { return *slider_; }
  QToolButton& play_button() { return *play_; }
  QString caption() const { return caption_->text(); }

 private:
  void sync();
  void advance();
  QWidget* make_buttons();
  Session& session_;
  QSlider* slider_;
  QLabel* position_;
  QLabel* caption_;
  QToolButton* play_;
  QComboBox* speed_;
  QToolButton* jump_;
  QTimer timer_;
};

}  // namespace zerolens::gui
