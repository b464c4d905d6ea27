#include "sim/trace/trace.hpp"

#include <nlohmann/json.hpp>

#include "sim/config/deepspeed_json.hpp"
#include "sim/config/overrides.hpp"
#include "sim/core/json_read.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/model/layers_json.hpp"
#include "sim/model/model_io.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "sim/trace/trace_counts.hpp"

namespace zerolens {
namespace {

using nlohmann::json;
using namespace json_read;

TraceRun run_of(const Plan& plan) {
  const ScheduleContext& c = plan.schedule.context;
  TraceRun run;
  run.model = plan.request.model.name;
  run.parameter_count = plan.request.model.parameter_count();
  run.cluster = plan.request.cluster.name;
  run.precision = to_string(c.precision);
  run.optimizer_device = to_string(c.optimizer_device);
  run.param_device = to_string(c.param_device);
  run.dp_size = c.dp_size;
  run.gpus_per_node = c.gpus_per_node;
  run.stage = c.stage;
  run.micro_batch = c.micro_batch;
  run.seq_len = c.seq_len;
  run.target_seq_len = c.target_seq_len;
  run.grad_accumulation = c.grad_accumulation;
  run.inputs = TraceInputs{plan.request.model, plan.request.config, plan.request.cluster, plan.request.options};
  return run;
}

json device_bytes(const std::array<Bytes, kDeviceCount>& bytes) {
  return {{"gpu", bytes[0]}, {"cpu", bytes[1]}, {"nvme", bytes[2]}};
}

std::array<Bytes, kDeviceCount> read_device_bytes(const json& object, const std::string& where) {
  as_object(object, where);
  std::array<Bytes, kDeviceCount> bytes{};
  const char* names[] = {"gpu", "cpu", "nvme"};
  for (int d = 0; d < kDeviceCount; ++d) {
    const json* value = member(object, names[d]);
    if (!value) throw InputError(join_key(where, names[d]), "missing");
    bytes[std::size_t(d)] = as_int(*value, join_key(where, names[d]));
  }
  return bytes;
}

json op_json(const TraceOp& op) {
  return {{"rank", op.rank},         {"index", op.index},       {"kind", op.kind},
          {"stream", op.stream},     {"phase", op.phase},       {"link", op.link},
          {"micro_step", op.micro_step}, {"layer", op.layer},   {"layer_name", op.layer_name},
          {"bucket", op.bucket},     {"group_size", op.group_size}, {"start_s", op.start},
          {"duration_s", op.duration}, {"bytes", op.bytes},     {"flops", op.flops},
          {"memory_after", device_bytes(op.memory_after)}};
}

const json& required(const json& object, const char* key, const std::string& where) {
  const json* value = member(object, key);
  if (!value) throw InputError(join_key(where, key), "missing");
  return *value;
}

TraceOp read_op(const json& object, const std::string& where) {
  as_object(object, where);
  TraceOp op;
  op.rank = int(as_int(required(object, "rank", where), join_key(where, "rank"), 0, 1 << 24));
  op.index = as_int(required(object, "index", where), join_key(where, "index"));
  op.kind = as_string(required(object, "kind", where), join_key(where, "kind"));
  op.stream = as_string(required(object, "stream", where), join_key(where, "stream"));
  op.phase = as_string(required(object, "phase", where), join_key(where, "phase"));
  op.link = as_string(required(object, "link", where), join_key(where, "link"));
  op.micro_step = std::int32_t(as_int(required(object, "micro_step", where), join_key(where, "micro_step"), 0, 1 << 30));
  op.layer = std::int32_t(as_int(required(object, "layer", where), join_key(where, "layer"), -1, 1 << 30));
  op.layer_name = as_string(required(object, "layer_name", where), join_key(where, "layer_name"));
  op.bucket = std::int32_t(as_int(required(object, "bucket", where), join_key(where, "bucket"), -1, 1 << 30));
  op.group_size = std::int32_t(as_int(required(object, "group_size", where), join_key(where, "group_size"), 1, 1 << 30));
  op.start = as_double(required(object, "start_s", where), join_key(where, "start_s"));
  op.duration = as_double(required(object, "duration_s", where), join_key(where, "duration_s"));
  op.bytes = as_int(required(object, "bytes", where), join_key(where, "bytes"));
  op.flops = as_double(required(object, "flops", where), join_key(where, "flops"));
  op.memory_after = read_device_bytes(required(object, "memory_after", where), join_key(where, "memory_after"));
  return op;
}

json framework_json(const TrainingConfig& config) {
  json framework = {{"name", to_string(config.framework)},
                    {"reshard_after_forward", config.fsdp.reshard_after_forward}};
  if (config.fsdp.reduce_dtype) framework["reduce_dtype"] = to_string(*config.fsdp.reduce_dtype);
  if (config.optimizer.kernel) framework["optimizer_kernel"] = to_string(*config.optimizer.kernel);
  if (config.is_colossalai()) {
    const ColossalAiConfig& c = config.colossalai;
    framework["shard_strategy"] = to_string(c.shard_strategy);
    framework["tensor_placement_policy"] = to_string(c.placement);
    framework["reuse_fp16_shard"] = c.reuse_fp16_shard;
    framework["reduce_scatter_bucket_size_mb"] = c.reduce_scatter_bucket_size_mb;
    framework["gpu_margin_mem_ratio"] = c.gpu_margin_mem_ratio;
  }
  return framework;
}

// ColossalAI's ShardedModelV2 options (traces of its profile).
void read_colossalai_framework(const json& framework, const std::string& w, ColossalAiConfig& c) {
  if (const json* v = member(framework, "shard_strategy"))
    c.shard_strategy =
        parse_shard_strategy(as_string(*v, w + ".shard_strategy"), w + ".shard_strategy");
  if (const json* v = member(framework, "tensor_placement_policy")) {
    const std::string key = w + ".tensor_placement_policy";
    c.placement = parse_placement_policy(as_string(*v, key), key);
  }
  if (const json* v = member(framework, "reuse_fp16_shard"))
    c.reuse_fp16_shard = as_bool(*v, w + ".reuse_fp16_shard");
  if (const json* v = member(framework, "reduce_scatter_bucket_size_mb"))
    c.reduce_scatter_bucket_size_mb = as_int(*v, w + ".reduce_scatter_bucket_size_mb", 0, 1 << 30);
  if (const json* v = member(framework, "gpu_margin_mem_ratio"))
    c.gpu_margin_mem_ratio = as_double(*v, w + ".gpu_margin_mem_ratio", 0, 1);
}

// Optional: traces written before the framework profiles are DeepSpeed's.
void read_framework(const json& object, const std::string& where, TrainingConfig& config) {
  if (!object.contains("framework")) return;
  const std::string w = where + ".framework";
  const json& framework = object.at("framework");
  as_object(framework, w);
  config.framework =
      parse_framework(as_string(required(framework, "name", w), w + ".name"), w + ".name");
  config.fsdp.reshard_after_forward =
      as_bool(required(framework, "reshard_after_forward", w), w + ".reshard_after_forward");
  if (framework.contains("reduce_dtype")) {
    config.fsdp.reduce_dtype = parse_precision(
        as_string(framework.at("reduce_dtype"), w + ".reduce_dtype"), w + ".reduce_dtype");
  }
  read_colossalai_framework(framework, w, config.colossalai);
  if (framework.contains("optimizer_kernel")) {  // optional: traces before it ran fused Adam
    config.optimizer.kernel =
        parse_optimizer_kernel(as_string(framework.at("optimizer_kernel"), w + ".optimizer_kernel"),
                               w + ".optimizer_kernel");
  }
}

json inputs_json(const TraceInputs& in) {
  return {{"model", model_to_json(in.model)},
          {"framework", framework_json(in.config)},
          {"deepspeed_config", to_deepspeed_json(in.config)},
          {"cluster", cluster_to_json(in.cluster)},
          {"schedule_options",
           {{"model_states_only", in.options.model_states_only},
            {"cuda_context_bytes", in.options.cuda_context_bytes},
            {"library_workspace_bytes", in.options.library_workspace_bytes},
            {"allocator", to_string(in.options.allocator.kind)},
            {"fragmentation_fraction", in.options.allocator.fragmentation_fraction}}}};
}

// Errors name the key under run.inputs; warnings (unknown keys) are dropped: the writer is ours.
TraceInputs read_inputs(const json& object) {
  const std::string w = "run.inputs";
  as_object(object, w);
  Diagnostics ignored;
  TraceInputs in;
  try {
    in.model = model_from_layers_json(required(object, "model", w), ignored, "trace model");
    in.config = parse_training_config(required(object, "deepspeed_config", w), ignored,
                                      in.model.shape ? std::optional(in.model.shape->hidden) : std::nullopt);
    in.cluster = cluster_from_json(required(object, "cluster", w), ignored);
  } catch (const InputError& error) {
    throw InputError(w, error.what());
  }
  read_framework(object, w, in.config);
  const json& options = required(object, "schedule_options", w);
  const std::string o = w + ".schedule_options";
  as_object(options, o);
  in.options.model_states_only = as_bool(required(options, "model_states_only", o), o + ".model_states_only");
  in.options.cuda_context_bytes = as_int(required(options, "cuda_context_bytes", o), o + ".cuda_context_bytes");
  in.options.library_workspace_bytes =
      as_int(required(options, "library_workspace_bytes", o), o + ".library_workspace_bytes");
  in.options.allocator.fragmentation_fraction = as_double(
      required(options, "fragmentation_fraction", o), o + ".fragmentation_fraction", 0, 1);
  // Traces written before the allocator model planned a flat allowance.
  in.options.allocator.kind = AllocatorKind::Flat;
  if (options.contains("allocator")) {
    try {
      in.options.allocator.kind =
          parse_allocator_kind(as_string(options.at("allocator"), o + ".allocator"));
    } catch (const InputError& error) {
      throw InputError(o + ".allocator", error.what());
    }
  }
  return in;
}

json run_json(const TraceRun& r) {
  json run = {{"model", r.model}, {"parameter_count", r.parameter_count}, {"cluster", r.cluster},
          {"precision", r.precision}, {"optimizer_device", r.optimizer_device}, {"param_device", r.param_device},
          {"dp_size", r.dp_size}, {"gpus_per_node", r.gpus_per_node}, {"stage", r.stage},
          {"micro_batch", r.micro_batch}, {"seq_len", r.seq_len}, {"grad_accumulation", r.grad_accumulation}};
  if (r.target_seq_len > 0) run["target_seq_len"] = r.target_seq_len;
  if (r.inputs) run["inputs"] = inputs_json(*r.inputs);
  return run;
}

TraceRun read_run(const json& object) {
  const std::string w = "run";
  as_object(object, w);
  TraceRun r;
  r.model = as_string(required(object, "model", w), "run.model");
  r.parameter_count = as_int(required(object, "parameter_count", w), "run.parameter_count");
  r.cluster = as_string(required(object, "cluster", w), "run.cluster");
  r.precision = as_string(required(object, "precision", w), "run.precision");
  r.optimizer_device = as_string(required(object, "optimizer_device", w), "run.optimizer_device");
  r.param_device = as_string(required(object, "param_device", w), "run.param_device");
  r.dp_size = int(as_int(required(object, "dp_size", w), "run.dp_size", 1, 1 << 24));
  r.gpus_per_node = int(as_int(required(object, "gpus_per_node", w), "run.gpus_per_node", 1, 1 << 20));
  r.stage = int(as_int(required(object, "stage", w), "run.stage", 0, 3));
  r.micro_batch = as_int(required(object, "micro_batch", w), "run.micro_batch", 1);
  r.seq_len = as_int(required(object, "seq_len", w), "run.seq_len", 1);
  r.grad_accumulation = as_int(required(object, "grad_accumulation", w), "run.grad_accumulation", 1);
  if (const json* target = member(object, "target_seq_len"))
    r.target_seq_len = as_int(*target, "run.target_seq_len", 1, std::int64_t(1) << 24);
  if (const json* inputs = member(object, "inputs")) {
    r.inputs = read_inputs(*inputs);
    r.inputs->config.seq_len = r.seq_len;  // not DeepSpeed fields
    if (r.target_seq_len > 0) r.inputs->config.target_seq_len = r.target_seq_len;
  }
  return r;
}

json summary_json(const TraceSummary& s) {
  json summary = {{"step_time_s", s.step_time},
                  {"tokens_per_s", s.tokens_per_second},
                  {"model_flops_per_gpu", s.model_flops_per_gpu},
                  {"mfu", s.mfu},
                  {"exposed_communication_s", s.exposed_communication},
                  {"exposed_offload_s", s.exposed_offload},
                  {"peak_bytes", device_bytes(s.peak)}};
  write_summary_counts(s, summary);
  return summary;
}

TraceSummary read_summary(const json& object) {
  const std::string w = "summary";
  as_object(object, w);
  TraceSummary s;
  s.step_time = as_double(required(object, "step_time_s", w), "summary.step_time_s");
  s.tokens_per_second = as_double(required(object, "tokens_per_s", w), "summary.tokens_per_s");
  s.model_flops_per_gpu = as_double(required(object, "model_flops_per_gpu", w), "summary.model_flops_per_gpu");
  s.mfu = as_double(required(object, "mfu", w), "summary.mfu");
  s.exposed_communication = as_double(required(object, "exposed_communication_s", w), "summary.exposed_communication_s");
  if (const json* offload = member(object, "exposed_offload_s"))
    s.exposed_offload = as_double(*offload, "summary.exposed_offload_s");
  s.peak = read_device_bytes(required(object, "peak_bytes", w), "summary.peak_bytes");
  read_summary_counts(object, s);
  return s;
}

}  // namespace

Trace make_trace(const Plan& plan, const Timeline& timeline, int ranks) {
  return make_trace(plan, timeline, replay_memory(plan.schedule, ReplayDetail::PerOp), ranks);
}

Trace make_trace(const Plan& plan, const Timeline& timeline, const MemoryTimeline& replay,
                 int ranks) {
  if (ranks < 1 || ranks > plan.schedule.context.dp_size) {
    throw InputError("--ranks", "must be between 1 and the data-parallel size (" +
                                    std::to_string(plan.schedule.context.dp_size) + ")");
  }
  Trace trace;
  trace.run = run_of(plan);
  trace.summary.step_time = timeline.step_time;
  trace.summary.tokens_per_second = timeline.tokens_per_second;
  trace.summary.model_flops_per_gpu = timeline.model_flops_per_gpu;
  trace.summary.mfu = timeline.mfu;
  trace.summary.exposed_communication = timeline.exposed_communication;
  trace.summary.exposed_offload = timeline.exposed_offload;
  for (const auto& device : plan.devices)
    trace.summary.peak[std::size_t(device.device)] = device.peak_per_rank;
  trace.summary.gpu_memory = replay.gpu;
  const auto& layers = plan.rank_model.layers;
  for (int rank = 0; rank < ranks; ++rank) {
    trace.ranks.push_back(rank);
    for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
      const Op& op = plan.schedule.ops[i];
      TraceOp t{.rank = rank, .index = std::int64_t(i), .kind = to_string(op.kind), .stream = to_string(op.stream),
                .phase = to_string(op.phase), .link = to_string(op.link), .micro_step = op.micro_step,
                .layer = op.layer, .bucket = op.bucket, .group_size = op.group_size};
      if (op.layer >= 0 && std::size_t(op.layer) < layers.size()) t.layer_name = layers[std::size_t(op.layer)].name;
      t.start = timeline.ops[i].start;
      t.duration = timeline.ops[i].duration;
      t.bytes = op.bytes;
      t.flops = op.flops;
      t.memory_after = replay.after_op[i];
      trace.ops.push_back(std::move(t));
    }
  }
  return trace;
}

json trace_to_json(const Trace& trace) {
  json ops = json::array();
  for (const auto& op : trace.ops) ops.push_back(op_json(op));
  return {{"schema", "zerolens.trace"}, {"version", kTraceVersion}, {"source", trace.source},
          {"units", {{"time", "seconds"}, {"bytes", "bytes"}, {"flops", "floating point operations"}}},
          {"run", run_json(trace.run)}, {"summary", summary_json(trace.summary)},
          {"ranks", trace.ranks}, {"ops", ops}};
}

Trace trace_from_json(const json& document) {
  as_object(document, "trace");
  if (as_string(required(document, "schema", ""), "schema") != "zerolens.trace") {
    throw InputError("schema", "not a zerolens trace (expected \"zerolens.trace\")");
  }
  if (as_int(required(document, "version", ""), "version") != kTraceVersion) {
    throw InputError("version", "unsupported trace version (expected " + std::to_string(kTraceVersion) + ")");
  }
  Trace trace;
  trace.source = as_string(required(document, "source", ""), "source");
  if (trace.source != "sim" && trace.source != "exec") throw InputError("source", "must be \"sim\" or \"exec\"");
  trace.run = read_run(required(document, "run", ""));
  trace.summary = read_summary(required(document, "summary", ""));
  const json& ranks = required(document, "ranks", "");
  if (!ranks.is_array()) throw InputError("ranks", "must be an array of rank numbers");
  for (std::size_t i = 0; i < ranks.size(); ++i) trace.ranks.push_back(int(as_int(ranks[i], "ranks[" + std::to_string(i) + "]", 0, 1 << 24)));
  const json& ops = required(document, "ops", "");
  if (!ops.is_array()) throw InputError("ops", "must be an array of ops");
  for (std::size_t i = 0; i < ops.size(); ++i) trace.ops.push_back(read_op(ops[i], "ops[" + std::to_string(i) + "]"));
  return trace;
}

}  // namespace zerolens
