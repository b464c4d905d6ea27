#include "sim/plan/walkthrough.hpp"
#include "sim/config/deepspeed.hpp"
#include "sim/model/presets.hpp"

#include <nlohmann/json.hpp>

namespace zerolens {

PlanRequest walkthrough_request() {
  const WalkthroughSetup setup;
  // Written as a DeepSpeed config so the request is the one `zerolens trace --walkthrough` builds
  // from the same values through its flags.
  const nlohmann::json deepspeed = {
      {"train_micro_batch_size_per_gpu", setup.micro_batch},
      {"fp16", {{"enabled", setup.precision == Precision::Fp16}}},
      {"bf16", {{"enabled", setup.precision == Precision::Bf16}}},
      {"zero_optimization",
       {{"stage", setup.stage},
        {"stage3_param_persistence_threshold", setup.param_persistence_threshold},
        {"stage3_max_reuse_distance", setup.max_reuse_distance},
        {"stage3_prefetch_bucket_size", setup.prefetch_bucket_size},
        {"reduce_bucket_size", setup.reduce_bucket_size},
        {"contiguous_gradients", setup.contiguous_gradients}}}};
  PlanRequest request;
  request.model = model_from_preset(setup.model);
  Diagnostics diagnostics;
  request.config = parse_deepspeed_config(deepspeed, diagnostics, request.model.shape->hidden);
  request.config.seq_len = setup.seq_len;
  request.dp_size = setup.gpus;
  request.cluster = with_ranks(cluster_from_preset(setup.cluster), setup.gpus, 0);
  return request;
}

}  // namespace zerolens
