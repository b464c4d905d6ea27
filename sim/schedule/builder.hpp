#pragma once
// Building the schedule of one training step (docs/schedule.md).
#include <cstdint>

#include "sim/config/config.hpp"
#include "sim/model/model.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens {

// Builds the schedule. `config` must be validated and `batch` resolved for `cluster`'s dp size.
Schedule build_schedule(const Model& model, const TrainingConfig& config,
                        const ResolvedBatch& batch, std::int64_t seq_len, int dp_size,
                        int gpus_per_node, const ScheduleOptions& options);

}  // namespace zerolens
