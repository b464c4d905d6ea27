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
  // Chosen for the picture (both are DeepSpeed settings): the reduce bucket holds about one
  // transformer block's gradients (gpt2-tiny's h.N: 49,984 elements), so a reduce-scatter follows
  // each layer's backward instead of one after the whole backward (DeepSpeed's 5e8-element default
  // holds the whole toy model, and its buffer, 1 GB in fp16, dwarfs it); without
  // contiguous_gradients the hook leaves each gradient where autograd put it until its bucket is
  // reduced (stage3.py __add_grad_to_ipg_bucket copies it into the bucket's flat buffer only with
  // contiguous_gradients), so the full unreduced gradients show on every rank from their backward
  // to their reduce-scatter, which frees them.
  Elements reduce_bucket_size = 50'000;
  bool contiguous_gradients = false;
};

// The walkthrough's plan request (built from WalkthroughSetup{}).
PlanRequest walkthrough_request();

}  // namespace zerolens
