#pragma once
// What the executor's tensor and pipeline parallelism tests share (tests/exec/parallel_test_*.cpp,
// under mpirun): training a plan on this rank's groups, and cutting the whole model's tensors into
// a rank's TP shard and pipeline stage by row and column index (a second code path to the
// executor's own Megatron split).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "exec/comm/process_groups.hpp"
#include "exec/engine/context.hpp"
#include "exec/engine/zero_engine.hpp"
#include "exec/model/gpt2_model.hpp"
#include "gpt2_setup.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::exec::testing {

using zerolens::testing::gpt2_plan;
using zerolens::testing::Gpt2Setup;
using zerolens::testing::name_of;
using zerolens::testing::tiny_gpt2;

inline Communicator& world() {
  static const std::unique_ptr<Communicator> communicator = make_mpi_communicator();
  return *communicator;
}

inline bool four_ranks() {
  return world().size() == 4;
}

// Each unshared tensor of `model` (the layout's numbering) with its spec.
inline std::vector<const TensorSpec*> tensors_of(const Model& model) {
  std::vector<const TensorSpec*> specs;
  for (const Layer& layer : model.layers) {
    if (layer.shares_params_of >= 0) continue;
    for (const TensorSpec& spec : layer.params) specs.push_back(&spec);
  }
  return specs;
}

// Rank `rank`'s slice of a whole tensor `whole` as the shard `shard` holds it: a column or
// vocabulary split keeps rows [rank x R, (rank + 1) x R) of the whole [R t, C]; a row split the
// columns [rank x W, (rank + 1) x W) of every row of the whole [R, W t]; a replicated tensor all.
inline std::vector<float> slice(const TensorSpec& shard, const std::vector<float>& whole, int tp,
                                int rank) {
  const std::int64_t rows = shard.shape.front();
  const std::int64_t width = shard.shape.size() > 1 ? shard.shape.back() : 1;
  std::vector<float> part;
  switch (shard.split) {
    case TensorSplit::Replicated:
      return whole;
    case TensorSplit::Column:
    case TensorSplit::Vocab:
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < width; ++c)
          part.push_back(whole[std::size_t((rank * rows + r) * width + c)]);
      return part;
    case TensorSplit::Row:
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < width; ++c)
          part.push_back(whole[std::size_t(r * width * tp + rank * width + c)]);
      return part;
  }
  return part;
}

// Whole tensors concatenated in tensor order (full_parameters()) cut into tensors.
inline std::vector<std::vector<float>> split_tensors(const Model& model,
                                                     const std::vector<float>& flat) {
  std::vector<std::vector<float>> tensors;
  std::size_t at = 0;
  for (const TensorSpec* spec : tensors_of(model)) {
    const auto numel = std::size_t(spec->numel());
    tensors.emplace_back(flat.begin() + std::ptrdiff_t(at),
                         flat.begin() + std::ptrdiff_t(at + numel));
    at += numel;
  }
  return tensors;
}

// The largest |a - b| over the largest |b| of a tensor.
inline double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference = std::max(difference, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? difference / scale : difference;
}

inline double largest_magnitude(const std::vector<float>& values) {
  double largest = 0;
  for (const float v : values) largest = std::max(largest, std::abs(double(v)));
  return largest;
}

// The key projection's bias has no gradient: q . (k + b) adds q . b to every key's score of a
// query, which the softmax cancels. Its computed gradient is rounding noise on both sides (held
// below `noise` instead of relatively), so it takes no part in the relative comparisons.
inline bool analytically_zero(const TensorSpec& spec) {
  return spec.name.find("k_proj.bias") != std::string::npos;
}

struct Trained {
  std::vector<double> losses;
  std::vector<float> parameters;  // this rank's (its TP shard's), whole, in tensor order
  Bytes measured_peak = 0;
  CategoryBytes highs{};
  CategoryBytes at_peak{};  // the categories when the peak was reached
  // Counted over every step on hybrid sharding's replicate group and hpZ's secondary group.
  CollectiveCount replicate_all_reduce, hpz_all_gather;
};

inline Trained train(const Plan& plan, const Gpt2Setup& s, int steps) {
  const auto groups = std::make_shared<const ProcessGroups>(world(), plan.schedule.context);
  MemoryLedger ledger;
  Gpt2Model model(rank_model(plan, groups->place().stage),
                  {.micro_batch = s.micro_batch,
                   .seq_len = s.seq_len,
                   .checkpointing = s.checkpointing,
                   .activation_element_bytes = plan.request.config.precision.param_bytes(),
                   .tensor_parallel_rank = groups->place().tensor},
                  ledger);
  ZeroEngine engine(plan, groups, model, ledger);
  Trained run;
  for (int step = 0; step < steps; ++step) {
    ledger.reset_peaks();
    run.losses.push_back(engine.step(step).loss);
    if (ledger.peak(Device::Gpu) > run.measured_peak) {
      run.measured_peak = ledger.peak(Device::Gpu);
      run.at_peak = ledger.categories_at_peak(Device::Gpu);
    }
    const CategoryBytes highs = ledger.category_highs(Device::Gpu);
    for (std::size_t c = 0; c < highs.size(); ++c) run.highs[c] = std::max(run.highs[c], highs[c]);
  }
  run.parameters = engine.full_parameters();
  if (groups->replicate() != nullptr)
    run.replicate_all_reduce = groups->replicate()->count(OpKind::AllReduce);
  if (groups->secondary() != nullptr)
    run.hpz_all_gather = groups->secondary()->count(OpKind::AllGather);
  return run;
}

// "+1.2e-07 -3.4e-08 ...": the run's loss minus the reference's, step by step (the parity
// tests print them).
inline std::string loss_differences(const Trained& run, const Trained& reference) {
  std::string text;
  for (std::size_t step = 0; step < run.losses.size(); ++step) {
    char item[32];
    std::snprintf(item, sizeof item, "%s%+.2e", step > 0 ? " " : "",
                  run.losses[step] - reference.losses[step]);
    text += item;
  }
  return text;
}

// The whole model's tensor a shard's or stage's tensor is part of: the same name, or for a tied
// LM head's copy on the last stage the word embeddings it copies.
inline std::size_t whole_tensor(const Model& whole, const TensorSpec& part) {
  std::string name = part.name;
  if (const auto at = name.find(" (copy of "); at != std::string::npos)
    name = name.substr(at + 10, name.size() - at - 11);
  const auto specs = tensors_of(whole);
  for (std::size_t t = 0; t < specs.size(); ++t) {
    if (specs[t]->name == name) return t;
  }
  throw std::out_of_range(name);
}

// Model states exactly the schedule's, the peak within 3% of its replay's (this rank's stage).
inline void expect_memory_of(const Schedule& schedule, const Trained& run) {
  const auto predicted = category_highs(schedule);
  for (const Category state :
       {Category::Params, Category::Grads, Category::MasterParams, Category::OptimizerStates}) {
    EXPECT_EQ(run.highs[std::size_t(state)],
              predicted[std::size_t(Device::Gpu)][std::size_t(state)])
        << to_string(state);
  }
  const DevicePeak predicted_peak =
      replay_memory(schedule, ReplayDetail::Peaks).devices[std::size_t(Device::Gpu)];
  const Bytes peak = predicted_peak.peak;
  std::string categories;
  for (int c = 0; c < kCategoryCount; ++c) {
    categories += std::string(" ") + to_string(Category(c)) + " " +
                  std::to_string(predicted_peak.categories[std::size_t(c)]) + "/" +
                  std::to_string(run.at_peak[std::size_t(c)]);
  }
  EXPECT_LT(std::abs(double(run.measured_peak) - double(peak)) / double(peak), 0.03)
      << "stage " << schedule.context.pipeline_stage << ": measured " << run.measured_peak
      << " predicted " << peak << "; at the peak, predicted/measured:" << categories
      << " (predicted at op " << predicted_peak.peak_op << ")";
}

}  // namespace zerolens::exec::testing
