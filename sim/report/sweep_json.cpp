#include <nlohmann/json.hpp>

#include "sim/report/sweep_json.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

json per_device(const std::array<Bytes, kDeviceCount>& bytes) {
  json out = json::object();
  for (int d = 0; d < kDeviceCount; ++d) out[to_string(Device(d))] = bytes[std::size_t(d)];
  return out;
}

void add_layout(json& out, const ParallelLayout& layout) {
  out["tensor_parallel"] = layout.tensor;
  out["sequence_parallel"] = layout.sequence_parallel;
  out["pipeline_parallel"] = layout.pipeline;
  out["virtual_stages"] = layout.virtual_stages;
  out["data_parallel"] = layout.data;
  out["expert_parallel"] = layout.expert;
}

const char* to_string(FamilyFate fate) {
  switch (fate) {
    case FamilyFate::OnFront:
      return "on_front";
    case FamilyFate::Dominated:
      return "dominated";
    case FamilyFate::NothingFits:
      return "nothing_fits";
    case FamilyFate::Refused:
      return "refused";
  }
  return "?";
}

json family_json(const SweepFamily& family) {
  json out = json::object();
  add_layout(out, family.layout);
  out["enumerated"] = family.enumerated;
  out["evaluated"] = family.evaluated;
  out["fitting"] = family.fitting;
  out["pruned"] = family.pruned;
  out["refused"] = family.refused;
  out["on_front"] = family.on_front;
  out["fate"] = to_string(family.fate);
  out["verdict"] = family.verdict;
  return out;
}

json result_json(const SweepResult& result, std::int64_t rank) {
  const SweepPoint& p = result.point;
  json out = {{"rank", rank > 0 ? json(rank) : json(nullptr)},
              {"zeropp", p.zeropp ? json(to_string(*p.zeropp)) : json(nullptr)},
              {"stage", p.stage},
              {"offload_optimizer", to_string(p.optimizer)},
              {"offload_param", to_string(p.param)},
              {"train_micro_batch_size_per_gpu", p.micro_batch},
              {"gradient_accumulation_steps", p.grad_accumulation},
              {"activation_checkpointing", p.checkpointing},
              {"fits", result.fits},
              {"peak_bytes", per_device(result.peak)},
              {"capacity_bytes", per_device(result.capacity)},
              {"headroom", result.headroom},
              {"pareto", result.pareto}};
  add_layout(out, p.layout);
  if (result.fits) {
    out["step_time_s"] = result.step_time;
    out["tokens_per_s"] = result.tokens_per_second;
    out["model_flops_per_gpu"] = result.model_flops_per_gpu;
    out["mfu"] = result.mfu;
    out["exposed_communication_s"] = result.exposed_communication;
  }
  return out;
}

}  // namespace

json sweep_to_json(const SweepReport& report, const PlanRequest& base) {
  json results = json::array();
  std::int64_t rank = 0;
  for (const auto& result : report.results) results.push_back(result_json(result, result.fits ? ++rank : 0));
  json families = json::array();
  for (const auto& family : report.families) families.push_back(family_json(family));
  return {{"schema", "zerolens.sweep"},
          {"version", kSweepJsonVersion},
          {"model", base.model.name},
          {"parameter_count", base.model.parameter_count()},
          {"trainable_parameter_count", base.model.trainable_parameter_count()},
          {"cluster", base.cluster.name},
          {"dp_size", base.dp_size},
          {"precision", to_string(base.config.precision.precision)},
          {"train_batch_size", report.train_batch_size},
          {"batch_per_rank", report.batch_per_rank},
          {"enumerated", report.enumerated},
          {"evaluated", report.evaluated},
          {"pruned", report.pruned},
          {"refused", report.refused},
          {"fitting", report.fitting},
          {"families", families},
          {"notes", report.notes},
          {"results", results}};
}

}  // namespace zerolens
