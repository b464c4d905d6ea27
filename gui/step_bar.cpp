#include "gui/step_bar.hpp"

#include <QAbstractItemView>
#include <QHBoxLayout>
#include <QMenu>
#include <QShortcut>
#include <QSignalBlocker>
#include <QVBoxLayout>
#include <algorithm>

#include "gui/op_words.hpp"

namespace zerolens::gui {
namespace {

constexpr int kSpeeds[] = {1, 2, 5, 10, 25, 50};  // ops per second

QToolButton* small_button(const QString& text, const QString& tip, QWidget* parent) {
  auto* button = new QToolButton(parent);
  button->setText(text);
  button->setToolTip(tip);
  button->setFocusPolicy(Qt::NoFocus);  // keys belong to the step cursor, not to a focused button
  return button;
}

}  // namespace

StepBar::StepBar(Session& session, QWidget* parent) : QWidget(parent), session_(session) {
  slider_ = new QSlider(Qt::Horizontal, this);
  slider_->setToolTip(
      "The step cursor: one position per op of the schedule (\u2190 \u2192 to step)");
  position_ = new QLabel(this);
  position_->setMinimumWidth(80);
  caption_ = new QLabel(this);
  caption_->setWordWrap(true);
  caption_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QFont font = caption_->font();
  font.setPointSize(font.pointSize() + 1);
  caption_->setFont(font);
  auto* top = new QHBoxLayout;
  top->addWidget(make_buttons());
  top->addWidget(slider_, 1);
  top->addWidget(position_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 2, 6, 4);
  layout->addLayout(top);
  layout->addWidget(caption_);
  connect(slider_, &QSlider::valueChanged, this, [this](int value) { session_.set_step(value); });
  connect(&session_, &Session::stepChanged, this, &StepBar::sync);
  connect(&session_, &Session::planChanged, this, &StepBar::sync_seed_steps);
  connect(&session_, &Session::rankChanged, this, &StepBar::sync);
  connect(&timer_, &QTimer::timeout, this, &StepBar::advance);
  sync_seed_steps();
}

void StepBar::sync_seed_steps() {
  seed_steps_ = session_.planned() ? zerolens::gui::seed_steps(session_.planned()->plan)
                                   : std::vector<SeedStep>{};
  seed_step_ = 0;
  seed_mode_ = false;
  {
    const QSignalBlocker block(seed_);
    seed_->clear();
    seed_->addItem("Seed step");
    for (const SeedStep& step : seed_steps_) {
      seed_->addItem(
          QString("Seed step %1: %2").arg(step.number).arg(QString::fromStdString(step.title)));
      seed_->setItemData(seed_->count() - 1, QString::fromStdString(seed_step_caption(step)),
                         Qt::ToolTipRole);
    }
  }
  seed_->setEnabled(!seed_steps_.empty());
  seed_->setToolTip(seed_steps_.empty()
                        ? "The seed walkthrough's 27 steps need a ZeRO-3 schedule that gathers "
                          "and releases each layer in forward and reduce-scatters gradients in "
                          "backward (the 4-GPU walkthrough): this plan's has no such moments"
                        : "The seed walkthrough's 27 steps (\"Visualize ZeRO-DP\"), each an op of "
                          "this step or the state before its first op, with the seed's caption "
                          "(Shift+\u2192 / Shift+\u2190: the next / previous one)");
  seed_->view()->setMinimumWidth(seed_->view()->sizeHintForColumn(0) + 24);
  sync();
}

bool StepBar::show_seed_step(int number) {
  if (number < 1 || number > int(seed_steps_.size())) return false;
  seed_step_ = number;
  seed_mode_ = true;
  session_.set_step(seed_steps_[std::size_t(number - 1)].op);
  sync();
  return true;
}

QWidget* StepBar::make_buttons() {
  auto* box = new QWidget(this);
  auto* row = new QHBoxLayout(box);
  row->setContentsMargins(0, 0, 0, 0);
  auto* start = small_button("|\u25c0", "Before the first op (Home)", box);
  auto* back = small_button("\u25c0", "Previous op (\u2190)", box);
  play_ = small_button("Pause", "Play / pause (Space)", box);
  play_->setFixedWidth(play_->sizeHint().width());  // the wider label: the bar does not shift
  play_->setText("Play");
  auto* forward = small_button("\u25b6", "Next op (\u2192)", box);
  auto* end = small_button("\u25b6|", "Last op (End)", box);
  speed_ = new QComboBox(box);
  for (int speed : kSpeeds) speed_->addItem(QString("%1 op/s").arg(speed), speed);
  speed_->setCurrentIndex(3);
  speed_->setToolTip("Playback speed");
  jump_ = new QToolButton(box);
  jump_->setText("Jump to");
  jump_->setPopupMode(QToolButton::InstantPopup);
  auto* menu = new QMenu(jump_);
  for (Moment m : {Moment::Gather, Moment::Release, Moment::Reduce, Moment::Update, Moment::Peak}) {
    menu->addAction(to_string(m), this, [this, m] { jump_to(m); });
  }
  jump_->setMenu(menu);
  seed_ = new QComboBox(box);
  seed_->setFocusPolicy(Qt::NoFocus);
  // The menu is wide enough for its titles; the box itself stays narrow (the slider keeps room).
  seed_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  seed_->setMinimumContentsLength(13);
  connect(seed_, &QComboBox::activated, this, [this](int index) {
    if (index > 0) show_seed_step(index);
  });
  for (QWidget* w :
       std::initializer_list<QWidget*>{start, back, play_, forward, end, speed_, jump_, seed_})
    row->addWidget(w);
  connect(start, &QToolButton::clicked, this, [this] { session_.set_step(-1); });
  connect(back, &QToolButton::clicked, this, [this] { step_by(-1); });
  connect(play_, &QToolButton::clicked, this, &StepBar::toggle_play);
  connect(forward, &QToolButton::clicked, this, [this] { step_by(1); });
  connect(end, &QToolButton::clicked, this, [this] { session_.set_step(session_.op_count() - 1); });
  connect(speed_, &QComboBox::currentIndexChanged, this,
          [this] { timer_.setInterval(1000 / speed_->currentData().toInt()); });
  timer_.setInterval(1000 / speed_->currentData().toInt());
  return box;
}

void StepBar::install_shortcuts(QWidget& window) {
  const std::pair<QKeySequence, std::function<void()>> keys[] = {
      {Qt::Key_Right, [this] { step_by(1); }},
      {Qt::Key_Left, [this] { step_by(-1); }},
      {Qt::Key_PageDown, [this] { step_by(10); }},
      {Qt::Key_PageUp, [this] { step_by(-10); }},
      {Qt::Key_Home, [this] { session_.set_step(-1); }},
      {Qt::Key_End, [this] { session_.set_step(session_.op_count() - 1); }},
      {Qt::Key_Space, [this] { toggle_play(); }},
      {QKeySequence(Qt::SHIFT | Qt::Key_Right), [this] { step_seed(1); }},
      {QKeySequence(Qt::SHIFT | Qt::Key_Left), [this] { step_seed(-1); }}};
  for (const auto& [sequence, action] : keys) {
    auto* shortcut = new QShortcut(sequence, &window);
    connect(shortcut, &QShortcut::activated, this, action);
  }
}

void StepBar::step_seed(int direction) {
  if (seed_steps_.empty()) return;
  const std::int64_t at = session_.step();
  int target = 0;
  if (seed_step_ > 0) {
    target = seed_step_ + direction;
  } else if (direction > 0) {  // the first step at or after the cursor (from the start: step 1)
    for (const SeedStep& step : seed_steps_)
      if (step.op >= at) {
        target = step.number;
        break;
      }
  } else {  // the last step at or before it
    for (const SeedStep& step : seed_steps_)
      if (step.op <= at) target = step.number;
  }
  show_seed_step(std::clamp(target, 1, kSeedStepCount));
}

void StepBar::step_by(std::int64_t delta) {
  session_.set_step(session_.step() + delta);
}

void StepBar::jump_to(Moment moment) {
  if (!session_.planned()) return;
  const std::int64_t op = next_moment(session_.planned()->plan, session_.step(), moment);
  if (op >= 0) session_.set_step(op);
}

void StepBar::toggle_play() {
  if (timer_.isActive()) {
    timer_.stop();
  } else {
    if (session_.step() >= session_.op_count() - 1) session_.set_step(-1);
    timer_.start();
  }
  play_->setText(timer_.isActive() ? "Pause" : "Play");
}

void StepBar::advance() {
  if (session_.step() >= session_.op_count() - 1) {
    toggle_play();
    return;
  }
  step_by(1);
}

void StepBar::sync() {
  const QSignalBlocker block(slider_);
  slider_->setRange(-1, int(std::max<std::int64_t>(0, session_.op_count() - 1)));
  slider_->setValue(int(session_.step()));
  position_->setText(session_.step() < 0
                         ? QString("start / %1").arg(session_.op_count())
                         : QString("op %1 / %2").arg(session_.step() + 1).arg(session_.op_count()));
  const Planned* planned = session_.planned();
  if (!planned) {
    caption_->setText({});
    return;
  }
  // A seed step's caption stays while the cursor is on its op; once one was chosen, the cursor on
  // another step's op shows that one's (the first of those on the op).
  if (seed_step_ > 0 && seed_steps_[std::size_t(seed_step_ - 1)].op != session_.step())
    seed_step_ = 0;
  if (seed_mode_ && seed_step_ == 0) {
    for (const SeedStep& step : seed_steps_)
      if (step.op == session_.step()) {
        seed_step_ = step.number;
        break;
      }
  }
  const QSignalBlocker block_seed(seed_);
  seed_->setCurrentIndex(seed_step_);
  std::string caption = op_caption(*planned, session_.step(), session_.selected_rank());
  if (seed_step_ > 0)
    caption = seed_step_caption(seed_steps_[std::size_t(seed_step_ - 1)]) + "\n" + caption;
  if (session_.step() >= 0) {
    const std::string reason =
        op_reason(planned->plan.schedule, std::size_t(session_.step()), planned->plan.rank_model);
    if (!reason.empty()) caption += "\nWhy: " + reason + ".";
  }
  caption_->setText(QString::fromStdString(caption));
}

}  // namespace zerolens::gui
