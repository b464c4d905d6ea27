#pragma once
// fp16 loss scaling with DeepSpeed's rules (deepspeed/runtime/fp16/loss_scaler.py). The loss (and
// so every gradient) is multiplied by the scale in backward and divided by it before the update.
// Dynamic scaling (fp16 "loss_scale": 0): on an overflowing step the update is skipped and, unless
// hysteresis absorbs it, the scale is halved (not below min_loss_scale); after loss_scale_window
// steps in a row without overflow since the last one it doubles. Hysteresis h: the first h - 1
// overflows only count down (restored to h when the scale grows, or after every good step with
// consecutive_hysteresis). A static scale never changes; fp32 and bf16 train with scale 1.
#include <cstdint>
#include <stdexcept>

#include "sim/config/config.hpp"

namespace zerolens::exec {

// An overflow at the minimum scale: DeepSpeed stops the run there rather than train on.
class LossScaleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LossScaler {
 public:
  explicit LossScaler(const PrecisionConfig& precision);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // After each step, with whether its gradients overflowed (on any rank). Throws LossScaleError on
  // an overflow at min_loss_scale.
  void update(bool overflow);

  // For checkpoints: good steps since the last overflow (or the start) and hysteresis left.
  std::int64_t good_steps() const { return iteration_ - last_overflow_ - 1; }
  int hysteresis_left() const { return hysteresis_left_; }
  void restore(double scale, std::int64_t good_steps, int hysteresis_left);

 private:
  LossScaleConfig config_;
  bool dynamic_ = false;
  double scale_ = 1;
  std::int64_t iteration_ = 0, last_overflow_ = -1;
  int hysteresis_left_ = 1;
};

}  // namespace zerolens::exec
