#pragma once
// The 4-GPU ZeRO-3 toy step of the walkthrough in the seed document, shared by
// `zerolens trace --walkthrough` and the GUI: the data split four ways, each GPU holding its
// partition of parameters, gradients and optimizer states, every layer's parameters gathered before
// use and released after, gradients reduced to their owners, owners updating their partitions.
#include <cstdint>
#include <string>

#include "sim/plan/plan.hpp"

namespace zerolens {

struct WalkthroughSetup {
  std::string model = "gpt2-tiny";
  std::string cluster = "dgx-a100-80gb";
  int gpus = 4;
  int stage = 3;
  Precision precision = Precision::Fp16;
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 128;
  // Every tensor partitioned, nothing kept between forward and backward, no prefetch: each gather
  // and release of the pictures is an op of its own.
  Elements param_persistence_threshold = 0;
  Elements max_reuse_distance = 0;
  Elements prefetch_bucket_size = 0;
};

// The walkthrough's plan request (built from WalkthroughSetup{}).
PlanRequest walkthrough_request();

}  // namespace zerolens
