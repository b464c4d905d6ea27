#include "exec/engine/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace zerolens::exec {

LossScaler::LossScaler(const PrecisionConfig& precision) : config_(precision.loss_scale) {
  if (precision.precision != Precision::Fp16) return;
  dynamic_ = config_.dynamic();
  scale_ = dynamic_ ? std::ldexp(1.0, config_.initial_scale_power) : config_.static_loss_scale;
  hysteresis_left_ = config_.hysteresis;
}

// DynamicLossScaler.update_scale: iteration_ and last_overflow_ play cur_iter and
// last_overflow_iter, so growth comes when (iteration - last overflow) is a multiple of the window.
void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    if (config_.hysteresis == 1 || hysteresis_left_ == 1) {
      if (scale_ == config_.min_loss_scale) {
        throw LossScaleError("fp16 gradients overflowed at the minimum loss scale (fp16.min_loss_scale = " +
                             std::to_string(config_.min_loss_scale) + "); training cannot go on");
      }
      scale_ = std::max(scale_ / 2, config_.min_loss_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_ = iteration_;
  } else {
    if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
    if ((iteration_ - last_overflow_) % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
      scale_ *= 2;
    }
  }
  ++iteration_;
}

void LossScaler::restore(double scale, std::int64_t good_steps, int hysteresis_left) {
  if (!dynamic_) return;
  scale_ = scale;
  iteration_ = good_steps;
  last_overflow_ = -1;
  hysteresis_left_ = hysteresis_left;
}

}  // namespace zerolens::exec
