#include "sim/schedule/pipeline_order.hpp"

#include <algorithm>
#include <string>

#include "sim/core/error.hpp"

namespace zerolens {
namespace {

std::vector<PipelineUnit> gpipe(std::int32_t m) {
  std::vector<PipelineUnit> units;
  for (std::int32_t i = 0; i < m; ++i) units.push_back({true, i, 0});
  for (std::int32_t i = 0; i < m; ++i) units.push_back({false, i, 0});
  return units;
}

std::vector<PipelineUnit> one_f_one_b(int size, int stage, std::int32_t m) {
  const std::int32_t warmup = std::min<std::int32_t>(size - stage - 1, m);
  std::vector<PipelineUnit> units;
  for (std::int32_t i = 0; i < warmup; ++i) units.push_back({true, i, 0});
  for (std::int32_t i = 0; i < m - warmup; ++i) {
    units.push_back({true, i + warmup, 0});
    units.push_back({false, i, 0});
  }
  for (std::int32_t i = m - warmup; i < m; ++i) units.push_back({false, i, 0});
  return units;
}

PipelineUnit interleaved_unit(std::int64_t k, int size, int chunks, bool forward) {
  const std::int64_t group = std::int64_t(size) * chunks;
  const auto in_group = k % group;
  auto chunk = std::int32_t(in_group / size);
  if (!forward) chunk = chunks - 1 - chunk;
  return {forward, std::int32_t(k / group * size + k % size), chunk};
}

std::vector<PipelineUnit> interleaved(int size, int stage, int chunks, std::int32_t m) {
  if (m % size != 0) {
    throw InputError("gradient_accumulation_steps",
                     "the interleaved schedule needs the micro-batches (" + std::to_string(m) +
                         ") to be a multiple of the pipeline stages (" + std::to_string(size) +
                         ")");
  }
  const std::int64_t total = std::int64_t(m) * chunks;
  const std::int64_t warmup =
      m == size ? total
                : std::min<std::int64_t>(
                      total, std::int64_t(size - stage - 1) * 2 + std::int64_t(chunks - 1) * size);
  std::vector<PipelineUnit> units;
  for (std::int64_t k = 0; k < warmup; ++k)
    units.push_back(interleaved_unit(k, size, chunks, true));
  for (std::int64_t k = 0; k < total - warmup; ++k) {
    units.push_back(interleaved_unit(k + warmup, size, chunks, true));
    units.push_back(interleaved_unit(k, size, chunks, false));
  }
  for (std::int64_t k = total - warmup; k < total; ++k)
    units.push_back(interleaved_unit(k, size, chunks, false));
  return units;
}

}  // namespace

std::vector<PipelineUnit> pipeline_order(const PipelineParallelism& pipeline, int stage,
                                         std::int64_t micro_batches) {
  if (micro_batches > (std::int64_t(1) << 24)) {
    throw InputError("gradient_accumulation_steps",
                     "must be at most 2^24 with pipeline parallelism");
  }
  const auto m = std::int32_t(micro_batches);
  switch (pipeline.schedule) {
    case PipelineSchedule::GPipe:
      return gpipe(m);
    case PipelineSchedule::OneFOneB:
      return one_f_one_b(pipeline.size, stage, m);
    case PipelineSchedule::Interleaved:
      return interleaved(pipeline.size, stage, pipeline.virtual_stages, m);
  }
  return one_f_one_b(pipeline.size, stage, m);
}

}  // namespace zerolens
