// GPT-2 (gpt2-tiny) trained by the ZeRO engine under mpirun (1, 2, 4 ranks): the loss falls, every
// stage follows data parallelism's loss trajectory, checkpointing changes nothing, and the memory
// the executor measures is the memory the plan predicts: model states exactly, the peak within 3%.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "exec/engine/zero_engine.hpp"
#include "exec/model/gpt2_model.hpp"
#include "gpt2_setup.hpp"
#include "sim/core/error.hpp"
#include "sim/model/presets.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::exec {
namespace {

Communicator& world() {
  static const std::unique_ptr<Communicator> communicator = make_mpi_communicator();
  return *communicator;
}

using testing::Gpt2Setup;
using testing::gpt2_plan;
using testing::name_of;
using testing::tiny_gpt2;

struct TrainingRun {
  std::vector<double> losses;
  MemoryLedger ledger;
  Bytes measured_peak = 0;
  CategoryBytes highs{};  // the highest each category reached on the device
};

void train(const Plan& plan, const Gpt2Setup& s, int steps, TrainingRun& run) {
  Gpt2Model model(plan.request.model,
                  {.micro_batch = s.micro_batch, .seq_len = s.seq_len, .checkpointing = s.checkpointing,
                   .activation_element_bytes = plan.request.config.precision.param_bytes()},
                  run.ledger);
  ZeroEngine engine(plan, world(), model, run.ledger);
  for (int step = 0; step < steps; ++step) {
    run.ledger.reset_peaks();
    run.losses.push_back(engine.step(step).loss);
    run.measured_peak = std::max(run.measured_peak, run.ledger.peak(Device::Gpu));
    const CategoryBytes highs = run.ledger.category_highs(Device::Gpu);
    for (std::size_t c = 0; c < highs.size(); ++c) run.highs[c] = std::max(run.highs[c], highs[c]);
  }
}

TEST(Gpt2Engine, LossFallsOnTheSyntheticCorpus) {
  const Gpt2Setup setup;
  const Plan plan = gpt2_plan(setup, world().size());
  TrainingRun run;
  train(plan, setup, 20, run);
  // Uniform guessing costs ln(256) = 5.545 nats; the permutation rule is learnable.
  EXPECT_NEAR(run.losses.front(), std::log(256.0), 0.15);
  EXPECT_LT(run.losses.back(), run.losses.front() - 1.0);
}

TEST(Gpt2Engine, EveryStageFollowsDataParallelism) {
  constexpr int kSteps = 20;
  Gpt2Setup dp_setup;
  dp_setup.grad_accumulation = 2;
  TrainingRun reference;
  train(gpt2_plan(dp_setup, world().size()), dp_setup, kSteps, reference);
  std::vector<Gpt2Setup> variants;
  for (int stage = 1; stage <= 3; ++stage) {
    variants.push_back(dp_setup);
    variants.back().stage = stage;
  }
  // fp32 with a host optimizer: an fp32 master on the host (or in NVMe files), parameters on the device
  variants.push_back({.stage = 2, .grad_accumulation = 2, .offload_optimizer = true});
  variants.push_back({.stage = 3, .grad_accumulation = 2, .offload_optimizer = true, .nvme = true});
  for (const Gpt2Setup& setup : variants) {
    SCOPED_TRACE(name_of(setup));
    TrainingRun run;
    train(gpt2_plan(setup, world().size()), setup, kSteps, run);
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_NEAR(run.losses[std::size_t(step)], reference.losses[std::size_t(step)], 2e-4) << "step " << step;
    }
  }
}

// In 16 bits too, every stage and host-offload variant follows data parallelism in the same
// precision (16-bit sums rounded in another order: within 2e-3), and the loss falls.
TEST(Gpt2Engine, SixteenBitAndOffloadFollowDataParallelism) {
  constexpr int kSteps = 20;
  for (const Precision precision : {Precision::Bf16, Precision::Fp16}) {
    Gpt2Setup dp_setup;
    dp_setup.grad_accumulation = 2;
    dp_setup.precision = precision;
    TrainingRun reference;
    train(gpt2_plan(dp_setup, world().size()), dp_setup, kSteps, reference);
    EXPECT_LT(reference.losses.back(), reference.losses.front() - 1.0) << to_string(precision);
    std::vector<Gpt2Setup> variants;
    for (int stage = 1; stage <= 3; ++stage) {
      Gpt2Setup setup = dp_setup;
      setup.stage = stage;
      variants.push_back(setup);
      setup.offload_optimizer = true;
      variants.push_back(setup);
      setup.offload_param = stage == 3;
      if (stage == 3) variants.push_back(setup);
      if (stage < 3) continue;
      setup.nvme = true;  // optimizer and parameters in files; then the optimizer only
      variants.push_back(setup);
      setup.offload_param = false;
      variants.push_back(setup);
      setup.pipelined = true;  // the next sub-group read while this one is updated
      variants.push_back(setup);
    }
    for (const Gpt2Setup& setup : variants) {
      SCOPED_TRACE(name_of(setup));
      TrainingRun run;
      train(gpt2_plan(setup, world().size()), setup, kSteps, run);
      for (int step = 0; step < kSteps; ++step) {
        EXPECT_NEAR(run.losses[std::size_t(step)], reference.losses[std::size_t(step)], 2e-3) << "step " << step;
      }
    }
  }
}

// Pipelined swapping changes when sub-groups are read and written, not the arithmetic: the same
// losses to the bit as one sub-group at a time.
TEST(Gpt2Engine, PipelinedNvmeSwappingGivesTheSameLosses) {
  Gpt2Setup setup{.stage = 3, .precision = Precision::Bf16, .offload_optimizer = true, .nvme = true};
  TrainingRun serial, pipelined;
  train(gpt2_plan(setup, world().size()), setup, 5, serial);
  setup.pipelined = true;
  train(gpt2_plan(setup, world().size()), setup, 5, pipelined);
  EXPECT_EQ(pipelined.losses, serial.losses);
}

TEST(Gpt2Engine, CheckpointingRecomputesTheSameLosses) {
  Gpt2Setup setup;
  setup.stage = 3;
  TrainingRun plain, checkpointed;
  train(gpt2_plan(setup, world().size()), setup, 5, plain);
  setup.checkpointing = true;
  train(gpt2_plan(setup, world().size()), setup, 5, checkpointed);
  EXPECT_EQ(checkpointed.losses, plain.losses);  // the same arithmetic in the same order
}

double relative_error(Bytes measured, Bytes predicted) {
  return std::abs(double(measured) - double(predicted)) / double(predicted);
}

// Model states are allocated as the schedule says, so their high-water marks match to the byte; the
// peak includes
// activations, whose executor layout differs from sim's terms by a few small buffers (layernorm
// statistics, int32 token ids, the q/k/v projection staging).
std::vector<Gpt2Setup> memory_variants() {
  std::vector<Gpt2Setup> variants;
  for (const Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    for (const bool checkpointing : {false, true}) {
      for (int stage = 0; stage <= 3; ++stage) {
        variants.push_back({.stage = stage, .checkpointing = checkpointing, .precision = precision});
      }
    }
    variants.push_back({.stage = 2, .precision = precision, .offload_optimizer = true});
    variants.push_back({.stage = 3, .precision = precision, .offload_optimizer = true});
  }
  for (const Precision precision : {Precision::Fp32, Precision::Bf16}) {
    variants.push_back({.stage = 3, .precision = precision, .offload_optimizer = true, .offload_param = true});
  }
  variants.push_back({.stage = 3, .precision = Precision::Bf16, .offload_optimizer = true, .nvme = true});
  variants.push_back(
      {.stage = 3, .precision = Precision::Fp16, .offload_optimizer = true, .offload_param = true, .nvme = true});
  variants.push_back({.stage = 3, .precision = Precision::Bf16, .offload_optimizer = true, .nvme = true, .pipelined = true});
  return variants;
}

// On the GPU and, with offload, on the host: every model-state category's high equals the plan's
// to the byte, the peak is within 3%.
TEST(Gpt2Engine, MeasuredMemoryMatchesThePlan) {
  for (const Gpt2Setup& setup : memory_variants()) {
    SCOPED_TRACE(name_of(setup));
    const Plan plan = gpt2_plan(setup, world().size());
    TrainingRun run;
    train(plan, setup, 2, run);
    const auto predicted = category_highs(plan.schedule);
    for (const Device device : {Device::Gpu, Device::Cpu, Device::Nvme}) {
      for (const Category model_state :
           {Category::Params, Category::Grads, Category::MasterParams, Category::OptimizerStates}) {
        EXPECT_EQ(run.ledger.category_highs(device)[std::size_t(model_state)],
                  predicted[std::size_t(device)][std::size_t(model_state)])
            << to_string(device) << " " << to_string(model_state);
      }
      const Bytes predicted_peak = plan.device(device).peak_per_rank;
      if (predicted_peak == 0) continue;
      const Bytes measured_peak = device == Device::Gpu ? run.measured_peak : run.ledger.peak(device);
      EXPECT_LT(relative_error(measured_peak, predicted_peak), 0.03)
          << to_string(device) << " measured " << measured_peak << " predicted " << predicted_peak;
    }
  }
}

TEST(Gpt2Engine, RefusesWhatItDoesNotImplement) {
  MemoryLedger ledger;
  EXPECT_THROW(Gpt2Model(model_from_preset("llama2-7b"), {}, ledger), InputError);
  EXPECT_THROW(Gpt2Model(model_from_preset("gpt2-tiny"), {}, ledger), InputError);  // dropout 0.1
  EXPECT_THROW(Gpt2Model(tiny_gpt2(), {.seq_len = 129}, ledger), InputError);       // 128 positions
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
}

TEST(Gpt2Corpus, FollowsItsPermutationSevenTimesInEight) {
  // The rule is a function: the successor of a token is the same wherever it is not replaced by
  // noise, so the most frequent successor of each token accounts for about 7/8 of its successions.
  constexpr std::int64_t kVocab = 64;
  std::vector<std::vector<int>> follows(kVocab, std::vector<int>(kVocab, 0));
  for (std::int64_t sample = 0; sample < 200; ++sample) {
    const auto tokens = synthetic_sequence(7, kVocab, sample, 65);
    for (std::size_t t = 0; t + 1 < tokens.size(); ++t) ++follows[std::size_t(tokens[t])][std::size_t(tokens[t + 1])];
  }
  double top = 0, total = 0;
  for (const auto& row : follows) {
    top += *std::max_element(row.begin(), row.end());
    for (const int n : row) total += n;
  }
  EXPECT_NEAR(top / total, 7.0 / 8.0 + 1.0 / 8.0 / kVocab, 0.02);
  EXPECT_EQ(synthetic_sequence(7, kVocab, 3, 10), synthetic_sequence(7, kVocab, 3, 10));
  EXPECT_NE(synthetic_sequence(7, kVocab, 3, 10), synthetic_sequence(8, kVocab, 3, 10));
}

}  // namespace
}  // namespace zerolens::exec
