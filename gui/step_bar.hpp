#pragma once
// The step cursor: a slider over the schedule's ops, play/pause with a speed, step back/forward,
// jumps to the walkthrough's key moments, the seed document's 27 steps (gui/seed_steps.hpp) with
// their captions, and the current op in words.
#include <QComboBox>
#include <QLabel>
#include <QSlider>
#include <QTimer>
#include <QToolButton>
#include <QWidget>

#include "gui/moments.hpp"
#include "gui/seed_steps.hpp"
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
  // Puts the cursor on the seed's step `number` (1-27) and shows its caption; false when the plan
  // has no such steps (it is not ZeRO-3). From then on, until the plan changes, the cursor on an
  // op of a seed step shows that step's caption.
  bool show_seed_step(int number);
  // The next or previous seed step from the cursor (Shift+Right, Shift+Left).
  void step_seed(int direction);
  int seed_step() const { return seed_step_; }  // 0: none shown
  const std::vector<SeedStep>& seed_steps() const { return seed_steps_; }
  QComboBox& seed_selector() { return *seed_; }
  bool playing() const { return timer_.isActive(); }
  QSlider& slider() { return *slider_; }
  QToolButton& play_button() { return *play_; }
  QString caption() const { return caption_->text(); }

 private:
  void sync();
  void sync_seed_steps();
  void advance();
  QWidget* make_buttons();
  Session& session_;
  QSlider* slider_;
  QLabel* position_;
  QLabel* caption_;
  QToolButton* play_;
  QComboBox* speed_;
  QToolButton* jump_;
  QComboBox* seed_;
  std::vector<SeedStep> seed_steps_;  // of the current plan
  int seed_step_ = 0;
  bool seed_mode_ = false;  // a seed step was chosen for this plan
  QTimer timer_;
};

}  // namespace zerolens::gui
