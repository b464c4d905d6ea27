// Expert parallelism with a real MPI all-to-all (ctest exec.mpi.np1/np2/np4): a MoE layer of 4
// GPT-2 MLP experts (top-2, hidden 8, width 16) trained by SGD on the same global batch with
// EP 1 (every expert on every rank, Hugging Face's dropless routing, all gradients all-reduced over
// data parallelism) and with EP 2 and 4 (the experts split over an expert-parallel group of
// consecutive ranks, tokens exchanged by all-to-all, expert gradients all-reduced over the ranks
// holding the same experts, the router's over all): the losses agree within the executor's fp32
// parity tolerance (2e-4, as its stages do: tests/exec/mpi_test_gpt2.cpp) and the gradients within
// float rounding. The capacity factor is the experts / top-k, so that no token is dropped and both
// compute the same function. The exchanges' bytes equal sim's plan of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/comm/process_groups.hpp"
#include "exec/memory/memory_ledger.hpp"
#include "exec/model/moe_layer.hpp"
#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

Communicator& world() {
  static const std::unique_ptr<Communicator> communicator = make_mpi_communicator();
  return *communicator;
}

constexpr std::size_t kHidden = 8, kTokens = 6;  // tokens per rank
constexpr int kExperts = 4, kTopK = 2, kSteps = 6;
const MoeLayerShape kShape{.hidden = kHidden,
                           .ffn = 16,
                           .experts = kExperts,
                           .top_k = kTopK,
                           .capacity_factor = double(kExperts) / kTopK,
                           .min_capacity = 0};

// Global token t's input and target: the same whoever holds it.
std::vector<float> rows_of(int rank, std::uint64_t salt) {
  std::vector<float> values(kTokens * kHidden);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::mt19937 generator(std::uint32_t(salt * 1'000'003 + std::size_t(rank) * values.size() + i));
    values[i] = std::uniform_real_distribution<float>(-1.0f, 1.0f)(generator);
  }
  return values;
}

struct Trajectory {
  std::vector<double> losses;
  std::vector<float> router_grad;                // the last step's, reduced
  std::vector<std::vector<float>> expert_grads;  // the last step's, reduced, by global expert
  std::vector<float> dx;                         // the last step's, this rank's tokens
  Bytes exchanged = 0;                           // all-to-all bytes of one step
  std::int64_t exchanges = 0;
};

// SGD (lr 0.5) on 0.5 |moe(x) - target|^2 averaged over the global batch.
Trajectory train(int ep) {
  Communicator& comm = world();
  const int n = comm.size();
  // DeepSpeed's groups, as the engine's ProcessGroups split them: EP runs of ep consecutive
  // ranks, the ranks holding the same experts ep apart. EP 1: every rank alone in its EP group
  // (its exchange counter), the experts' gradients reduced over all.
  const ProcessGroups groups(comm, {.data = n}, ep);
  const std::unique_ptr<Communicator> alone = comm.split(comm.rank(), 0);
  Communicator* const ep_group = ep > 1 ? groups.expert() : alone.get();
  Communicator* const expert_data = ep > 1 ? groups.expert_data() : &comm;
  MemoryLedger ledger;
  ExpertParallelMoe layer(kShape, ep > 1 ? ep_group : nullptr, ledger);
  // The layer's parameters and gradients are the caller's: the router, then each local expert's
  // fc_in weight and bias, fc_out weight and bias, initialised by global expert index.
  const std::size_t h = kHidden, f = kShape.ffn;
  std::vector<std::vector<float>> weights{std::vector<float>(std::size_t(kExperts) * h)};
  ExpertParallelMoe::initialise_router(weights[0], 42);
  for (int e = 0; e < layer.local_experts(); ++e) {
    for (const std::size_t size : {f * h, f, h * f, h}) weights.emplace_back(size);
    const std::size_t at = weights.size() - 4;
    ExpertParallelMoe::initialise_expert(weights[at], weights[at + 1], weights[at + 2],
                                         weights[at + 3], 42, layer.first_expert() + e);
  }
  std::vector<std::vector<float>> grads;
  for (const auto& w : weights) grads.emplace_back(w.size());
  std::vector<std::span<const float>> param_views(weights.begin(), weights.end());
  std::vector<std::span<float>> grad_views(grads.begin(), grads.end());
  const std::vector<float> x = rows_of(comm.rank(), 1), target = rows_of(comm.rank(), 2);
  const double global_tokens = double(kTokens) * n;
  Trajectory run;
  for (int step = 0; step < kSteps; ++step) {
    const Bytes before = ep_group->count(OpKind::AllToAll).bytes;
    const std::int64_t calls_before = ep_group->count(OpKind::AllToAll).calls;
    std::vector<float> y(x.size());
    layer.forward(x, kTokens, param_views, y);
    double loss = 0;
    std::vector<float> dy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double error = double(y[i]) - double(target[i]);
      loss += 0.5 * error * error;
      dy[i] = float(error / global_tokens);
    }
    run.losses.push_back(comm.report_sum(loss) / global_tokens);
    for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
    run.dx.assign(x.size(), 0.0f);
    layer.backward(dy, param_views, grad_views, run.dx);
    run.exchanged = ep_group->count(OpKind::AllToAll).bytes - before;
    run.exchanges = ep_group->count(OpKind::AllToAll).calls - calls_before;
    comm.all_reduce_sum(grads[0]);
    for (std::size_t t = 1; t < grads.size(); ++t) expert_data->all_reduce_sum(grads[t]);
    run.router_grad = grads[0];
    run.expert_grads.assign(std::size_t(kExperts), {});
    for (int e = 0; e < layer.local_experts(); ++e) {
      std::vector<float>& all = run.expert_grads[std::size_t(layer.first_expert() + e)];
      for (std::size_t t = 0; t < 4; ++t) {
        const std::vector<float>& g = grads[1 + 4 * std::size_t(e) + t];
        all.insert(all.end(), g.begin(), g.end());
      }
    }
    for (std::size_t t = 0; t < weights.size(); ++t) {
      for (std::size_t i = 0; i < weights[t].size(); ++i) weights[t][i] -= 0.5f * grads[t][i];
    }
    // Everything the layer kept for backward is freed with it.
    EXPECT_EQ(ledger.current(Device::Gpu), 0) << "step " << step;
  }
  // The bytes sim plans for the step: two exchanges in forward, two in backward, each the
  // [E, C, h] buffer in fp32 (the executor's CPU activations).
  if (ep > 1) {
    EXPECT_EQ(run.exchanges, 4);
    EXPECT_EQ(run.exchanged, 4 * layer.routing().exchange_elements(std::int64_t(kTokens)) * 4);
    // Capacity = ceil(6 tokens / 4 experts x 2 x 2) = 6: every token fits.
    EXPECT_EQ(layer.capacity(), kTokens);
  }
  return run;
}

void expect_near(const std::vector<float>& actual, const std::vector<float>& expected,
                 const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], 1e-6 + 1e-5 * std::abs(expected[i])) << what << " " << i;
}

TEST(ExpertParallel, EveryEpSizeFollowsDataParallelism) {
  const int n = world().size();
  const Trajectory reference = train(1);
  EXPECT_LT(reference.losses.back(), reference.losses.front());  // it learns
  int compared = 0;
  for (const int ep : {2, 4}) {
    if (n % ep != 0 || kExperts % ep != 0) continue;
    ++compared;
    SCOPED_TRACE("ep " + std::to_string(ep));
    const Trajectory run = train(ep);
    double largest = 0;
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_NEAR(run.losses[std::size_t(step)], reference.losses[std::size_t(step)], 2e-4)
          << "step " << step;
      largest = std::max(
          largest, std::abs(run.losses[std::size_t(step)] - reference.losses[std::size_t(step)]));
    }
    if (world().rank() == 0)
      std::printf("ep %d on %d ranks: losses %.9f .. %.9f, largest difference from ep 1 %.3g\n", ep,
                  n, reference.losses.front(), reference.losses.back(), largest);
    expect_near(run.router_grad, reference.router_grad, "router gradient");
    expect_near(run.dx, reference.dx, "input gradient");
    for (int e = 0; e < kExperts; ++e) {
      if (!run.expert_grads[std::size_t(e)].empty())
        expect_near(run.expert_grads[std::size_t(e)], reference.expert_grads[std::size_t(e)],
                    "expert gradient");
    }
  }
  if (compared == 0) GTEST_SKIP() << "one rank: no expert-parallel group to compare";
}

// The MoE groups ProcessGroups splits off the DP group are DeepSpeed's
// (_create_expert_and_data_parallel, deepspeed/utils/groups.py: for ep_size 2 on 4 ranks
// "expert_parallel_group = [0,1], [2,3]" and "expert_data_parallel_group = [0,2], [1,3]"): the
// world ranks gathered over each group are rank / ep x ep + i (i < ep) and rank % ep + ep x i
// (i < n / ep). An EP size that does not divide the DP ranks is refused naming --ep.
TEST(ExpertParallel, ProcessGroupsSplitDeepSpeedsGroups) {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  const auto members = [&](Communicator& group) {
    const std::vector<float> mine{float(r)};
    std::vector<float> all(std::size_t(group.size()));
    group.all_gather(mine, all);
    return std::vector<int>(all.begin(), all.end());
  };
  EXPECT_EQ(ProcessGroups(comm, {.data = n}, 1).expert(), nullptr);
  for (const int ep : {2, 4}) {
    if (n % ep != 0) continue;
    SCOPED_TRACE("ep " + std::to_string(ep));
    const ProcessGroups groups(comm, {.data = n}, ep);
    std::vector<int> expert, expert_data;
    for (int i = 0; i < ep; ++i) expert.push_back(r / ep * ep + i);
    for (int i = 0; i < n / ep; ++i) expert_data.push_back(r % ep + ep * i);
    EXPECT_EQ(members(*groups.expert()), expert);
    EXPECT_EQ(members(*groups.expert_data()), expert_data);
  }
  EXPECT_THROW(ProcessGroups(comm, {.data = n}, n + 1), InputError);
}

// The all-to-all itself: block j of rank r's input arrives as block r of rank j's output, and the
// bytes are counted as nccl-tests counts them (the whole buffer).
TEST(MpiCommunicator, AllToAllSendsEachBlockToItsRank) {
  Communicator& comm = world();
  const int n = comm.size();
  const std::size_t block = 3;
  std::vector<float> input(block * std::size_t(n)), output(input.size());
  for (std::size_t i = 0; i < input.size(); ++i)
    input[i] = float(comm.rank() * 100) + float(i / block) * 10 + float(i % block);
  const auto before = comm.count(OpKind::AllToAll);
  comm.all_to_all(input, output);
  for (std::size_t i = 0; i < output.size(); ++i)
    ASSERT_EQ(output[i], float((i / block) * 100) + float(comm.rank()) * 10 + float(i % block))
        << i;
  EXPECT_EQ(comm.count(OpKind::AllToAll).calls, before.calls + 1);
  EXPECT_EQ(comm.count(OpKind::AllToAll).bytes, before.bytes + Bytes(input.size() * 4));
  EXPECT_THROW(comm.all_to_all(input, std::span<float>(output.data(), output.size() - 1)),
               std::invalid_argument);
}

}  // namespace
}  // namespace zerolens::exec
