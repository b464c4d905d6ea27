// Fuzzes the cluster JSON reader: any input either yields a valid cluster or raises InputError,
// and a valid cluster round trips through its JSON form.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/hardware/cluster_json.hpp"
#include "sim/hardware/hardware.hpp"
#include "sim/model/presets.hpp"
#include "sim/predict/prediction.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

// Every rate a valid cluster allows prices a step at a finite, positive time (issue 19, finding 5:
// 1e-300 B/s gave inf and "fits").
void check_finite_step(const zerolens::Cluster& cluster) {
  zerolens::PlanRequest request;
  request.model = zerolens::model_from_preset("gpt2-tiny");
  request.config.zero.stage = 3;
  request.config.zero.offload_optimizer.device = zerolens::OffloadDevice::Cpu;
  request.config.batch.micro_batch_per_gpu = 1;
  request.config.seq_len = 16;
  request.dp_size = 2 * cluster.node.gpus_per_node;  // two nodes: every link is priced
  request.cluster = zerolens::with_ranks(cluster, request.dp_size, cluster.node.gpus_per_node);
  try {
    const zerolens::Prediction prediction = zerolens::predict(request);
    const double step = prediction.timeline.step_time;
    if (!std::isfinite(step) || step <= 0 || !std::isfinite(prediction.timeline.mfu)) std::abort();
  } catch (const zerolens::InputError&) {  // e.g. a GPU without the precision
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::optional<nlohmann::json> parsed = zerolens::fuzzing::strict_document(data, size);
  if (!parsed) return 0;
  const nlohmann::json& document = *parsed;
  zerolens::Diagnostics diagnostics;
  try {
    const zerolens::Cluster cluster = zerolens::cluster_from_json(document, diagnostics);
    const nlohmann::json written = zerolens::cluster_to_json(cluster);
    if (zerolens::cluster_to_json(zerolens::cluster_from_json(written, diagnostics)) != written) std::abort();
    check_finite_step(cluster);
  } catch (const zerolens::InputError&) {
  }
  return 0;
}
