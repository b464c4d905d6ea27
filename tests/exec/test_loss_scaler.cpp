// The fp16 loss scaler against sequences worked by hand from DeepSpeed's rules
// (deepspeed/runtime/fp16/loss_scaler.py, DynamicLossScaler.update_scale).
#include <gtest/gtest.h>

#include <vector>

#include "exec/engine/loss_scaler.hpp"

namespace zerolens::exec {
namespace {

PrecisionConfig fp16(int power, int window, int hysteresis, bool consecutive = false, double min_scale = 1) {
  PrecisionConfig precision;
  precision.precision = Precision::Fp16;
  precision.loss_scale.initial_scale_power = power;
  precision.loss_scale.loss_scale_window = window;
  precision.loss_scale.hysteresis = hysteresis;
  precision.loss_scale.consecutive_hysteresis = consecutive;
  precision.loss_scale.min_loss_scale = min_scale;
  return precision;
}

// The scale each step uses, given which steps overflow.
std::vector<double> scales(LossScaler& scaler, const std::vector<bool>& overflows) {
  std::vector<double> used;
  for (const bool overflow : overflows) {
    used.push_back(scaler.scale());
    scaler.update(overflow);
  }
  used.push_back(scaler.scale());
  return used;
}

// Start 2^10, window 3, hysteresis 2; overflows at steps 1, 2, 3 and 8 (cur_iter = step):
//  0 good: (0 - -1) % 3 = 1       -> 1024        1 overflow: hysteresis 2 -> 1, keep 1024
//  2 overflow: hysteresis 1 -> 512               3 overflow: -> 256 (last overflow 3)
//  4, 5 good: (4-3), (5-3) not multiples of 3    6 good: (6-3) % 3 = 0 -> 512, hysteresis back to 2
//  7 good                                        8 overflow: hysteresis 2 -> 1, keep 512
//  9, 10 good                                    11 good: (11-8) % 3 = 0 -> 1024
TEST(LossScaler, DynamicScaleFollowsDeepSpeedsRules) {
  LossScaler scaler(fp16(10, 3, 2));
  const std::vector<bool> overflows = {false, true, true, true, false, false, false, false, true, false, false, false};
  const std::vector<double> expected = {1024, 1024, 1024, 512, 256, 256, 256, 512, 512, 512, 512, 512, 1024};
  EXPECT_EQ(scales(scaler, overflows), expected);
  EXPECT_EQ(scaler.hysteresis_left(), 2);
}

// Consecutive hysteresis restores the count after every good step, so isolated overflows never
// halve the scale: 2^4, window 100, hysteresis 2, overflows at 0, 2 and then 3, 4.
//  0 overflow: 2 -> 1          1 good: back to 2     2 overflow: 2 -> 1
//  3 overflow: halve -> 8      4 overflow: -> 4      5 good: hysteresis 2
TEST(LossScaler, ConsecutiveHysteresisForgivesIsolatedOverflows) {
  LossScaler scaler(fp16(4, 100, 2, true));
  const std::vector<double> expected = {16, 16, 16, 16, 8, 4};
  EXPECT_EQ(scales(scaler, {true, false, true, true, true}), expected);
  EXPECT_EQ(scaler.hysteresis_left(), 1);
  scaler.update(false);
  EXPECT_EQ(scaler.hysteresis_left(), 2);
}

// Window 1 doubles after every good step; halving stops at min_loss_scale, and an overflow there
// ends the run, as DeepSpeed raises.
TEST(LossScaler, MinimumScaleAndGrowth) {
  LossScaler scaler(fp16(3, 1, 1, false, 2));
  const std::vector<double> expected = {8, 16, 8, 4, 2};
  EXPECT_EQ(scales(scaler, {false, true, true, true}), expected);
  EXPECT_THROW(scaler.update(true), LossScaleError);
}

TEST(LossScaler, StaticScaleAndOtherPrecisions) {
  PrecisionConfig fixed = fp16(16, 3, 1);
  fixed.loss_scale.static_loss_scale = 128;
  LossScaler scaler(fixed);
  EXPECT_FALSE(scaler.dynamic());
  scaler.update(true);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 128);
  PrecisionConfig bf16;
  bf16.precision = Precision::Bf16;
  EXPECT_EQ(LossScaler(bf16).scale(), 1);
}

// A checkpoint's (scale, good steps, hysteresis) resumes the same sequence.
TEST(LossScaler, RestoreContinuesTheWindow) {
  LossScaler original(fp16(10, 4, 2));
  for (const bool overflow : {false, true, false, false}) original.update(overflow);
  LossScaler resumed(fp16(10, 4, 2));
  resumed.restore(original.scale(), original.good_steps(), original.hysteresis_left());
  for (int i = 0; i < 6; ++i) {
    original.update(false);
    resumed.update(false);
    EXPECT_EQ(resumed.scale(), original.scale()) << i;
  }
}

}  // namespace
}  // namespace zerolens::exec
