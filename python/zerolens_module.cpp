// The Python module `zerolens`: the planner, the step simulation and the sweep from a training
// script or a notebook. Every call takes the CLI's planning flags as keywords (the flag's name
// without its dashes, '-' as '_': stage=3, offload_optimizer="cpu", deepspeed_config=a dict or a
// path) and returns what the CLI's --json prints, as Python dicts and lists (docs/python.md).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <functional>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "sim/core/error.hpp"
#include "sim/hardware/hardware.hpp"
#include "sim/model/presets.hpp"
#include "sim/plan/request.hpp"
#include "sim/plan/variants.hpp"
#include "sim/predict/prediction.hpp"
#include "sim/predict/sweep.hpp"
#include "sim/report/plan_json.hpp"
#include "sim/report/sweep_json.hpp"
#include "sim/trace/trace.hpp"

namespace py = pybind11;

namespace zerolens {
namespace {

// Python objects and JSON meet through the json module: what the CLI writes is what Python reads.
py::object to_python(const nlohmann::json& document) {
  return py::module_::import("json").attr("loads")(document.dump());
}

nlohmann::json to_json(const py::handle& value, const std::string& keyword) {
  try {
    return nlohmann::json::parse(
        py::module_::import("json").attr("dumps")(value).cast<std::string>());
  } catch (const py::error_already_set&) {
    throw py::type_error(keyword + ": not JSON-serialisable");
  }
}

template <typename T>
T as(const py::handle& value, const std::string& keyword, const char* expected) {
  // bool is an int to Python: refuse it where a number is meant, and a number where a bool is.
  const bool is_bool = py::isinstance<py::bool_>(value);
  if constexpr (std::is_same_v<T, bool>) {
    if (!is_bool)
      throw py::type_error(keyword + ": expected " + expected + ", got " +
                           std::string(py::str(value.get_type().attr("__name__"))));
  } else if (is_bool) {
    throw py::type_error(keyword + ": expected " + expected + ", got bool");
  }
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(keyword + ": expected " + expected + ", got " +
                         std::string(py::str(value.get_type().attr("__name__"))));
  }
}

using Setter = std::function<void(PlanInputs&, const py::handle&, const std::string&)>;

template <typename T, typename Field>
Setter field(Field field_of, const char* expected) {
  return [field_of, expected](PlanInputs& inputs, const py::handle& value,
                              const std::string& keyword) {
    field_of(inputs) = as<T>(value, keyword, expected);
  };
}

template <typename Enum, typename Field>
Setter named(Field field_of, Enum (*parse)(const std::string&, const std::string&)) {
  return
      [field_of, parse](PlanInputs& inputs, const py::handle& value, const std::string& keyword) {
        field_of(inputs) = parse(as<std::string>(value, keyword, "str"), keyword);
      };
}

#define ZL_FIELD(T, member, expected) \
  field<T>(                           \
      [](PlanInputs & i) -> auto& { return i.member; }, expected)
#define ZL_NAMED(member, parse) \
  named(                        \
      [](PlanInputs & i) -> auto& { return i.member; }, parse)

void set_deepspeed_config(PlanInputs& inputs, const py::handle& value, const std::string& keyword) {
  if (py::isinstance<py::str>(value)) {
    inputs.deepspeed_config = value.cast<std::string>();
  } else if (py::isinstance<py::dict>(value)) {
    inputs.deepspeed_document = to_json(value, keyword);
  } else {
    throw py::type_error(keyword + ": expected a path (str) or a config (dict)");
  }
}

// set={"zero_optimization.round_robin_gradients": True}: --set KEY=VALUE, the value as JSON.
void set_keys(PlanInputs& inputs, const py::handle& value, const std::string& keyword) {
  if (!py::isinstance<py::dict>(value))
    throw py::type_error(keyword + ": expected a dict of dotted DeepSpeed keys");
  for (const auto& [key, item] : value.cast<py::dict>()) {
    inputs.set.push_back(as<std::string>(key, keyword, "str keys") + "=" +
                         to_json(item, keyword).dump());
  }
}

// lora_targets="q_proj,v_proj" as the CLI's flag, or a list of names as PEFT's target_modules.
void set_lora_targets(PlanInputs& inputs, const py::handle& value, const std::string& keyword) {
  if (py::isinstance<py::str>(value)) {
    inputs.lora_targets = value.cast<std::string>();
    return;
  }
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value))
    throw py::type_error(keyword + ": expected a str (comma list) or a list of module names");
  std::string joined;
  for (const auto& item : value)
    joined += (joined.empty() ? "" : ",") + as<std::string>(item, keyword, "str module names");
  inputs.lora_targets = joined;
}

const std::map<std::string, Setter>& plan_keywords() {
  static const std::map<std::string, Setter> keywords{
      {"model", ZL_FIELD(std::string, model, "str")},
      {"hf_config", ZL_FIELD(std::string, hf_config, "str (a config.json path)")},
      {"deepspeed_config", set_deepspeed_config},
      {"cluster", ZL_FIELD(std::string, cluster, "str")},
      {"gpus", ZL_FIELD(int, gpus, "int")},
      {"dp", ZL_FIELD(int, dp, "int")},
      {"gpus_per_node", ZL_FIELD(int, gpus_per_node, "int")},
      {"attention", ZL_FIELD(std::string, attention, "str")},
      {"dropout", ZL_FIELD(double, dropout, "float")},
      {"lora_rank", ZL_FIELD(int, lora_rank, "int")},
      {"lora_targets", set_lora_targets},
      {"quantize_base", ZL_FIELD(std::string, quantize_base, "str")},
      {"lora_dropout", ZL_FIELD(double, lora_dropout, "float")},
      {"framework", ZL_NAMED(framework, parse_framework)},
      {"reshard_after_forward", ZL_FIELD(bool, reshard_after_forward, "bool")},
      {"reduce_dtype", ZL_NAMED(reduce_dtype, parse_precision)},
      {"optimizer_kernel", ZL_NAMED(optimizer_kernel, parse_optimizer_kernel)},
      {"shard_strategy", ZL_NAMED(shard_strategy, parse_shard_strategy)},
      {"placement", ZL_NAMED(placement, parse_placement_policy)},
      {"reuse_fp16_shard", ZL_FIELD(bool, reuse_fp16_shard, "bool")},
      {"delayed_param_update", ZL_FIELD(bool, delayed_param_update, "bool")},
      {"dpu_warmup", ZL_FIELD(std::int64_t, delayed_param_update_warmup, "int")},
      {"stage", ZL_FIELD(int, stage, "int")},
      {"offload_optimizer", ZL_NAMED(offload_optimizer, parse_offload_device)},
      {"offload_param", ZL_NAMED(offload_param, parse_offload_device)},
      {"nvme_path", ZL_FIELD(std::string, nvme_path, "str")},
      {"pin_memory", ZL_FIELD(bool, pin_memory, "bool")},
      {"reduce_bucket_size", ZL_FIELD(double, reduce_bucket_size, "a number")},
      {"allgather_bucket_size", ZL_FIELD(double, allgather_bucket_size, "a number")},
      {"prefetch_bucket_size", ZL_FIELD(double, prefetch_bucket_size, "a number")},
      {"param_persistence_threshold", ZL_FIELD(double, param_persistence_threshold, "a number")},
      {"max_live_parameters", ZL_FIELD(double, max_live_parameters, "a number")},
      {"max_reuse_distance", ZL_FIELD(double, max_reuse_distance, "a number")},
      {"sub_group_size", ZL_FIELD(double, sub_group_size, "a number")},
      {"overlap_comm", ZL_FIELD(bool, overlap_comm, "bool")},
      {"contiguous_gradients", ZL_FIELD(bool, contiguous_gradients, "bool")},
      {"reduce_scatter", ZL_FIELD(bool, reduce_scatter, "bool")},
      {"micro_batch", ZL_FIELD(std::int64_t, micro_batch, "int")},
      {"grad_accum", ZL_FIELD(std::int64_t, grad_accum, "int")},
      {"train_batch", ZL_FIELD(std::int64_t, train_batch, "int")},
      {"seq_len", ZL_FIELD(std::int64_t, seq_len, "int")},
      {"target_seq_len", ZL_FIELD(std::int64_t, target_seq_len, "int")},
      {"tp", ZL_FIELD(int, tensor_parallel, "int")},
      {"sp", ZL_FIELD(bool, sequence_parallel, "bool")},
      {"pp", ZL_FIELD(int, pipeline_parallel, "int")},
      {"virtual_stages", ZL_FIELD(int, virtual_stages, "int")},
      {"pipeline_schedule", ZL_NAMED(pipeline_schedule, parse_pipeline_schedule)},
      {"ep", ZL_FIELD(int, expert_parallel, "int")},
      {"capacity_factor", ZL_FIELD(double, capacity_factor, "float")},
      {"min_capacity", ZL_FIELD(int, min_capacity, "int")},
      {"shard_group", ZL_FIELD(int, shard_group, "int")},
      {"hpz", ZL_FIELD(int, hpz_partition_size, "int")},
      {"quantized_weights", ZL_FIELD(bool, quantized_weights, "bool")},
      {"quantized_gradients", ZL_FIELD(bool, quantized_gradients, "bool")},
      {"precision", ZL_NAMED(precision, parse_precision)},
      {"optimizer", ZL_FIELD(std::string, optimizer, "str")},
      {"momentum", ZL_FIELD(double, momentum, "float")},
      {"activation_checkpointing", ZL_FIELD(bool, activation_checkpointing, "bool")},
      {"cpu_checkpointing", ZL_FIELD(bool, cpu_checkpointing, "bool")},
      {"partition_activations", ZL_FIELD(bool, partition_activations, "bool")},
      {"set", set_keys},
      {"model_states_only", ZL_FIELD(bool, model_states_only, "bool")},
      {"cuda_context", ZL_FIELD(double, cuda_context_gib, "float (GiB)")},
      {"workspace", ZL_FIELD(double, workspace_gib, "float (GiB)")},
      {"allocator", ZL_FIELD(std::string, allocator, "str")},
      {"fragmentation", ZL_FIELD(double, fragmentation, "float")},
  };
  return keywords;
}

#undef ZL_FIELD
#undef ZL_NAMED

std::vector<std::string> names_of(const std::map<std::string, Setter>& keywords,
                                  std::vector<std::string> more = {}) {
  for (const auto& [name, setter] : keywords) more.push_back(name);
  return more;
}

[[noreturn]] void unknown_keyword(const std::string& name, const std::vector<std::string>& known) {
  const std::string suggestion = closest_name(name, known);
  throw py::type_error(
      "unexpected keyword '" + name + "'" +
      (suggestion.empty() ? std::string() : " (did you mean '" + suggestion + "'?)"));
}

// The keywords of the plan; the others are left in `rest` for the caller's own.
PlanInputs plan_inputs(const py::kwargs& kwargs, py::dict& rest) {
  PlanInputs inputs;
  inputs.micro_batch_if_unset = 1;  // as the CLI: without any batch size, a micro-batch of 1
  for (const auto& [key, value] : kwargs) {
    const auto name = key.cast<std::string>();
    const auto setter = plan_keywords().find(name);
    if (setter == plan_keywords().end()) {
      rest[key] = value;
      continue;
    }
    if (!value.is_none()) setter->second(inputs, value, name);
  }
  return inputs;
}

void warn_all(const Diagnostics& diagnostics) {
  const auto warn = py::module_::import("warnings").attr("warn");
  for (const auto& warning : diagnostics.warnings)
    warn(warning, py::module_::import("builtins").attr("UserWarning"));
}

PlanRequest request_of(const PlanInputs& inputs) {
  Diagnostics diagnostics;
  PlanRequest request = make_plan_request(inputs, diagnostics);
  warn_all(diagnostics);
  return request;
}

void refuse_rest(const py::dict& rest, const std::vector<std::string>& known) {
  for (const auto& [key, value] : rest) unknown_keyword(key.cast<std::string>(), known);
}

py::object plan(const py::kwargs& kwargs) {
  py::dict rest;
  const PlanRequest request = request_of(plan_inputs(kwargs, rest));
  refuse_rest(rest, names_of(plan_keywords()));
  nlohmann::json document;
  {
    const py::gil_scoped_release unlocked;
    document = plan_to_json(make_plan(request));
  }
  return to_python(document);
}

// DP, ZeRO-1/2/3 and each offload variant of the same job side by side, and those the planner
// refuses for it with the reason (plan --compare --json).
py::object compare(const py::kwargs& kwargs) {
  py::dict rest;
  const PlanRequest request = request_of(plan_inputs(kwargs, rest));
  refuse_rest(rest, names_of(plan_keywords()));
  nlohmann::json document;
  {
    const py::gil_scoped_release unlocked;
    document = compare_to_json(compare_variants(request));
  }
  return to_python(document);
}

double efficiency(const py::dict& rest, const char* name, double fallback) {
  if (!rest.contains(name)) return fallback;
  const double value = as<double>(rest[name], name, "float");
  if (!(value >= kMinEfficiency && value <= kMaxEfficiency))
    throw InputError(name, "must be in [" + std::to_string(kMinEfficiency) + ", " +
                               std::to_string(kMaxEfficiency) + "]");
  return value;
}

TimelineOptions timeline_options(const py::dict& rest) {
  TimelineOptions options;
  options.compute_efficiency = efficiency(rest, "compute_efficiency", options.compute_efficiency);
  options.memory_efficiency = efficiency(rest, "memory_efficiency", options.memory_efficiency);
  options.cpu_efficiency = efficiency(rest, "cpu_efficiency", options.cpu_efficiency);
  if (rest.contains("algorithm"))
    options.algorithm =
        parse_collective_algorithm(as<std::string>(rest["algorithm"], "algorithm", "str"));
  return options;
}

const std::vector<std::string> kTimelineKeywords{"compute_efficiency", "memory_efficiency",
                                                 "cpu_efficiency", "algorithm"};

void drop(py::dict& rest, const std::vector<std::string>& names) {
  for (const auto& name : names)
    if (rest.contains(name)) PyDict_DelItemString(rest.ptr(), name.c_str());
}

py::object trace(const py::kwargs& kwargs) {
  py::dict rest;
  const PlanRequest request = request_of(plan_inputs(kwargs, rest));
  const TimelineOptions options = timeline_options(rest);
  const int ranks = rest.contains("ranks") ? as<int>(rest["ranks"], "ranks", "int") : 1;
  if (ranks < 1) throw InputError("ranks", "must be at least 1 (the ranks the trace records)");
  drop(rest, kTimelineKeywords);
  drop(rest, {"ranks"});
  refuse_rest(rest, names_of(plan_keywords(), {"compute_efficiency", "memory_efficiency",
                                               "cpu_efficiency", "algorithm", "ranks"}));
  nlohmann::json document;
  {
    const py::gil_scoped_release unlocked;
    document = trace_to_json(predict(request, {.timeline = options, .trace_ranks = ranks}).trace);
  }
  return to_python(document);
}

template <typename T>
std::vector<T> list_of(const py::dict& rest, const char* name, const char* expected) {
  if (!rest.contains(name)) return {};
  std::vector<T> values;
  for (const auto& item : as<py::list>(rest[name], name, "list"))
    values.push_back(as<T>(item, name, expected));
  return values;
}

std::vector<OffloadDevice> devices_of(const py::dict& rest, const char* name) {
  std::vector<OffloadDevice> devices;
  for (const auto& text : list_of<std::string>(rest, name, "str"))
    devices.push_back(parse_offload_device(text, name));
  return devices;
}

const std::vector<std::string> kSweepKeywords{"stages",
                                              "optimizer_offloads",
                                              "param_offloads",
                                              "micro_batches",
                                              "checkpointing",
                                              "tp_sizes",
                                              "pp_sizes",
                                              "virtual_stage_counts",
                                              "sequence_parallel",
                                              "zeropp",
                                              "search_parallelism",
                                              "jobs",
                                              "all"};

SweepSpace sweep_space(const py::dict& rest, const PlanRequest& base) {
  SweepSpace space;
  if (rest.contains("stages")) space.stages = list_of<int>(rest, "stages", "int");
  if (rest.contains("optimizer_offloads"))
    space.optimizer_devices = devices_of(rest, "optimizer_offloads");
  if (rest.contains("param_offloads")) space.param_devices = devices_of(rest, "param_offloads");
  space.micro_batches = list_of<std::int64_t>(rest, "micro_batches", "int");
  if (rest.contains("checkpointing"))
    space.checkpointing = list_of<bool>(rest, "checkpointing", "bool");
  space.tensor_parallel = list_of<int>(rest, "tp_sizes", "int");
  space.pipeline_parallel = list_of<int>(rest, "pp_sizes", "int");
  space.virtual_stages = list_of<int>(rest, "virtual_stage_counts", "int");
  space.sequence_parallel = list_of<bool>(rest, "sequence_parallel", "bool");
  for (const auto& name : list_of<std::string>(rest, "zeropp", "str"))
    space.zeropp.push_back(parse_zeropp(name, "zeropp"));
  space.prune = !(rest.contains("all") && as<bool>(rest["all"], "all", "bool"));
  space.threads = rest.contains("jobs") ? as<int>(rest["jobs"], "jobs", "int")
                                        : int(std::max(1u, std::thread::hardware_concurrency()));
  if (space.threads < 1) throw InputError("jobs", "must be at least 1");
  if (rest.contains("search_parallelism") &&
      as<bool>(rest["search_parallelism"], "search_parallelism", "bool"))
    add_parallel_search(base, space);
  return space;
}

py::object sweep(const py::kwargs& kwargs) {
  py::dict rest;
  const PlanInputs inputs = plan_inputs(kwargs, rest);
  PlanRequest base = request_of(inputs);
  const std::string batch_note = default_sweep_batch(inputs, base);  // as the CLI's sweep
  const TimelineOptions options = timeline_options(rest);
  const SweepSpace space = sweep_space(rest, base);
  drop(rest, kTimelineKeywords);
  drop(rest, kSweepKeywords);
  std::vector<std::string> known = names_of(plan_keywords(), kSweepKeywords);
  known.insert(known.end(), kTimelineKeywords.begin(), kTimelineKeywords.end());
  refuse_rest(rest, known);
  nlohmann::json document;
  {
    const py::gil_scoped_release unlocked;
    SweepReport report = run_sweep(base, space, options);
    if (!batch_note.empty()) report.notes.insert(report.notes.begin(), batch_note);
    document = sweep_to_json(report, base);
  }
  return to_python(document);
}

py::dict presets() {
  py::dict out;
  out["models"] = model_preset_names();
  out["clusters"] = cluster_preset_names();
  return out;
}

}  // namespace
}  // namespace zerolens

PYBIND11_MODULE(zerolens, module) {
  using namespace zerolens;
  module.doc() =
      "zerolens: plan ZeRO data-parallel training (DeepSpeed, FSDP) before launch.\n"
      "plan(), compare(), trace() and sweep() take the CLI's planning flags as keywords (stage=3, "
      "offload_optimizer='cpu', deepspeed_config=<dict or path>, set={'dotted.key': value}) and "
      "return "
      "what `zerolens plan|trace|sweep --json` prints. Bad input raises ValueError (the key or "
      "keyword "
      "named) or TypeError (an unknown keyword, a value of the wrong type).";
  module.attr("__version__") = ZEROLENS_VERSION;
  py::register_exception<InputError>(module, "InputError", PyExc_ValueError);
  module.def("plan", &plan,
             "Memory per rank and device by category, traffic per link (schema zerolens.plan).");
  module.def("trace", &trace,
             "The step's timeline and predicted trace (schema zerolens.trace); ranks=, "
             "compute_efficiency=, "
             "memory_efficiency=, cpu_efficiency=, algorithm=.");
  module.def(
      "sweep", &sweep,
      "Every configuration that fits, ranked, with the Pareto front (schema zerolens.sweep); "
      "stages=, "
      "optimizer_offloads=, param_offloads=, micro_batches=, checkpointing=, tp_sizes=, pp_sizes=, "
      "virtual_stage_counts=, sequence_parallel=, zeropp=, search_parallelism=, jobs=, all=.");
  module.def("compare", &compare,
             "DP vs ZeRO-1/2/3 vs each offload variant of the same job, each variant's plan "
             "(schema zerolens.compare: what `zerolens plan --compare --json` prints).");
  module.def("presets", &presets, "The model and cluster presets' names.");
}
