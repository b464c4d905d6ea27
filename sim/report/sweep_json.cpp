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

json result_json(const SweepResult& result, std::int64_t rank) {
  const SweepPoint& p = result.point;
  json out = {{"rank", rank > 0 ? json(rank) : json(nullptr)},
              {"stage", p.stage},
              {"offload_optimizer", to_string(p.optimizer)},
              {"offload_param", to_string(p.param)},
              {"train_micro_batch_size_per_gpu", p.micro_batch},
              {"gradient_accumulation_steps", p.grad_accumulation},
              {"activation_checkpointing", p.checkpointing},
              {"fits", result.fits},
              {"peak_bytes", per_device(result.peak)},
              {"capacity_bytes", per_device(result.capacity)}};
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
  return {{"schema", "zerolens.sweep"},
          {"version", kSweepJsonVersion},
          {"model", base.model.name},
          {"parameter_count", base.model.parameter_count()},
          {"cluster", base.cluster.name},
          {"dp_size", base.dp_size},
          {"precision", to_string(base.config.precision.precision)},
          {"train_batch_size", report.train_batch_size},
          {"batch_per_rank", report.batch_per_rank},
          {"evaluated", report.evaluated},
          {"fitting", report.fitting},
          {"notes", report.notes},
          {"results", results}};
}

}  // namespace zerolens
