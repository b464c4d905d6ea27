#include "sim/plan/request.hpp"

#include <cmath>

#include "sim/core/json_read.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/model/lora.hpp"
#include "sim/model/model_io.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using PlanOptions = PlanInputs;

// --lora-rank and the settings of its adapters; a setting without adapters is refused by name.
Model with_plan_lora(const Model& model, const PlanOptions& o) {
  LoraConfig lora;
  if (o.quantize_base) lora.base_format = parse_weight_format(*o.quantize_base, "--quantize-base");
  if (!o.lora_rank) {
    const char* flag = o.lora_targets                                    ? "--lora-targets"
                       : o.lora_dropout                                  ? "--lora-dropout"
                       : lora.base_format != WeightFormat::TrainingDtype ? "--quantize-base"
                                                                         : nullptr;
    if (flag)
      throw InputError(flag,
                       "needs LoRA adapters (--lora-rank): a frozen base alone has "
                       "nothing to train");
    return model;
  }
  lora.rank = *o.lora_rank;
  if (lora.rank < 1) throw InputError("--lora-rank", "must be between 1 and 65536");
  if (o.lora_targets) lora.targets = parse_lora_targets(*o.lora_targets, "--lora-targets");
  lora.dropout = o.lora_dropout.value_or(0);
  return with_lora(model, lora);
}

Model load_plan_model(const PlanOptions& o, Diagnostics& diagnostics) {
  Model model = o.hf_config
                    ? model_from_hf_config(json_read::parse_json_file(*o.hf_config, "--hf-config"),
                                           diagnostics, *o.hf_config)
                    : load_model(o.model, diagnostics);
  if (o.attention) model = with_attention(model, parse_attention_impl(*o.attention));
  if (o.dropout) model = with_dropout(model, *o.dropout);
  return with_plan_lora(model, o);
}

// The file (DeepSpeed or ColossalAI) with the flags on top, read by sim in one pass; without any
// batch size in either, a micro-batch of 1.
TrainingConfig load_plan_config(const PlanOptions& o, const Model& model,
                                Diagnostics& diagnostics) {
  if (o.deepspeed_config && o.deepspeed_document)
    throw InputError("deepspeed_config", "give the config as a file or as a document, not both");
  json document = json::object();
  std::string source = "deepspeed_config";
  if (o.deepspeed_config) {
    document = json_read::parse_json_file(*o.deepspeed_config, "--deepspeed-config");
    source = *o.deepspeed_config;
  }
  if (o.deepspeed_document) document = *o.deepspeed_document;
  if (!document.is_object()) throw InputError(source, "the config must be a JSON object");
  ConfigOverrides overrides = o;
  overrides.micro_batch_if_unset = 1;
  std::optional<std::int64_t> hidden;
  if (model.shape) hidden = model.shape->hidden;
  return parse_training_config(document, diagnostics, hidden, overrides);
}

ScheduleOptions load_accounting(const PlanOptions& o) {
  ScheduleOptions options;
  options.model_states_only = o.model_states_only;
  auto gib = [](double value, const char* flag) {
    if (!(value >= 0) || value > 1e6) throw InputError(flag, "must be between 0 and 1e6 GiB");
    return Bytes(std::llround(value * double(kBytesPerGiB)));
  };
  if (o.cuda_context_gib) options.cuda_context_bytes = gib(*o.cuda_context_gib, "--cuda-context");
  if (o.workspace_gib) options.library_workspace_bytes = gib(*o.workspace_gib, "--workspace");
  if (o.allocator) options.allocator.kind = parse_allocator_kind(*o.allocator);
  if (o.fragmentation) {
    if (!(*o.fragmentation >= 0 && *o.fragmentation < 1)) {
      throw InputError("--fragmentation", "must be in [0, 1)");
    }
    if (o.allocator && options.allocator.kind != AllocatorKind::Flat) {
      throw InputError("--fragmentation",
                       "is the flat allowance: it goes with --allocator flat, not " + *o.allocator);
    }
    options.allocator =
        AllocatorSpec{.kind = AllocatorKind::Flat, .fragmentation_fraction = *o.fragmentation};
  }
  return options;
}

}  // namespace

PlanRequest make_plan_request(const PlanOptions& o, Diagnostics& diagnostics) {
  PlanRequest request;
  request.model = load_plan_model(o, diagnostics);
  request.config = load_plan_config(o, request.model, diagnostics);
  Cluster cluster = load_cluster(o.cluster, diagnostics);
  // One data-parallel rank is a TP group on every pipeline stage: tp x pp GPUs.
  const std::int64_t model_parallel =
      std::int64_t(request.config.tensor_parallel.size) * request.config.pipeline.size;
  const std::string split =
      request.config.pipeline.active() ? "tensor x pipeline parallel" : "tensor-parallel";
  const std::int64_t world = o.gpus ? *o.gpus
                             : o.dp ? std::int64_t(*o.dp) * model_parallel
                                    : cluster.total_gpus();
  if (o.dp && o.gpus && std::int64_t(*o.dp) * model_parallel != *o.gpus) {
    throw InputError("--dp", std::to_string(*o.dp) + " data-parallel x " +
                                 std::to_string(model_parallel) + " " + split + " ranks are " +
                                 std::to_string(std::int64_t(*o.dp) * model_parallel) +
                                 " GPUs, not --gpus " + std::to_string(*o.gpus));
  }
  if (world % model_parallel != 0 || world > 10'000'000) {
    throw InputError(o.gpus ? "--gpus" : "--tp",
                     std::to_string(world) + " GPUs do not split into " + split + " groups of " +
                         std::to_string(model_parallel) +
                         " (--gpus must be a multiple of --tp x --pp)");
  }
  request.dp_size = int(world / model_parallel);
  request.cluster = with_ranks(cluster, int(world), o.gpus_per_node.value_or(0));
  request.options = load_accounting(o);
  return request;
}

std::string default_sweep_batch(const PlanInputs& inputs, PlanRequest& request) {
  if (inputs.deepspeed_config || inputs.deepspeed_document || inputs.train_batch ||
      inputs.micro_batch || inputs.grad_accum)
    return {};
  const std::int64_t batch = kSweepDefaultBatchPerRank * request.dp_size;
  request.config.batch = {.train_batch_size = batch};
  return "global batch " + std::to_string(batch) + " (" +
         std::to_string(kSweepDefaultBatchPerRank) + " per GPU) assumed; set it with --train-batch";
}

}  // namespace zerolens
