// The CPU executor's speed as ratios measured in one run, whatever the machine:
// - the engine's host element operations (exec/memory/numbers.hpp: casts, accumulation, gradient
// norm)
//   over a memcpy of the same bytes (`per_memcpy`);
// - a whole ZeRO step of gpt2-tiny over the model's own forward and backward of the same layers
//   (`per_model_compute`: what the engine adds, gathers, reductions, casts and the update), so a
//   slow path anywhere in the step (as once a per-element call into the multi-threaded bulk casts
//   in Numbers::get, 9x slower steps) shows as a ratio.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "../exec/gpt2_setup.hpp"
#include "exec/engine/zero_engine.hpp"
#include "exec/memory/numbers.hpp"
#include "exec/model/gpt2_model.hpp"

namespace zerolens::exec {
namespace {

constexpr std::size_t kElements = std::size_t(1) << 20;

template <typename Operation>
void time_against_memcpy(benchmark::State& state, std::size_t bytes, Operation operation) {
  std::vector<std::byte> from(bytes, std::byte{1}), to(bytes);
  double operation_seconds = 0, copy_seconds = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    operation();
    auto middle = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
    auto end = std::chrono::steady_clock::now();
    operation_seconds += std::chrono::duration<double>(middle - start).count();
    copy_seconds += std::chrono::duration<double>(end - middle).count();
    state.SetIterationTime(std::chrono::duration<double>(middle - start).count());
  }
  state.counters["per_memcpy"] = operation_seconds / copy_seconds;
}

void BM_SumOfSquaresBf16(benchmark::State& state) {
  std::vector<std::uint16_t> bits(kElements, 0x3f80);  // 1.0
  const Numbers numbers(std::span<std::uint16_t>(bits), NumberFormat::Bf16);
  time_against_memcpy(state, kElements * 2,
                      [&] { benchmark::DoNotOptimize(numbers.sum_of_squares()); });
}
BENCHMARK(BM_SumOfSquaresBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_WidenBf16ToFp32(benchmark::State& state) {
  std::vector<std::uint16_t> bits(kElements, 0x3f80);
  std::vector<float> values(kElements);
  time_against_memcpy(state, kElements * 4, [&] {
    Numbers(std::span(values)).copy_from(Numbers(std::span(bits), NumberFormat::Bf16));
  });
}
BENCHMARK(BM_WidenBf16ToFp32)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_AddScaledBf16(benchmark::State& state) {
  std::vector<std::uint16_t> target(kElements, 0x3f80), source(kElements, 0x3f80);
  time_against_memcpy(state, kElements * 2, [&] {
    Numbers(std::span(target), NumberFormat::Bf16)
        .add_scaled(Numbers(std::span(source), NumberFormat::Bf16), 0.0f);
  });
}
BENCHMARK(BM_AddScaledBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The model alone on one micro-batch: every layer's forward, then every backward, on fp32 copies
// of the parameters (owners' tensors for shared layers), as the engine hands them over.
class ModelCompute {
 public:
  ModelCompute(const Plan& plan, std::vector<float> parameters, LayerModel& model)
      : plan_(plan),
        parameters_(std::move(parameters)),
        grads_(parameters_.size()),
        model_(model) {}
  void run() {
    const std::size_t layers = plan_.request.model.layers.size();
    model_.load_batch(0, plan_.schedule.context.micro_batch);
    for (std::size_t layer = 0; layer < layers; ++layer) model_.forward(layer, views(layer).first);
    for (std::size_t layer = layers; layer-- > 0;) {
      const auto [params, grads] = views(layer);
      model_.backward(layer, params, grads, 1.0f);
    }
  }

 private:
  std::pair<std::vector<std::span<const float>>, std::vector<std::span<float>>> views(
      std::size_t layer) {
    const int shared = plan_.request.model.layers[layer].shares_params_of;
    const std::size_t owner = shared >= 0 ? std::size_t(shared) : layer;
    const ParamLayout& layout = plan_.schedule.layout;
    std::size_t offset = 0;
    for (std::int32_t t = 0; t < layout.layer_first_tensor[owner]; ++t)
      offset += std::size_t(layout.tensor_numel[std::size_t(t)]);
    std::pair<std::vector<std::span<const float>>, std::vector<std::span<float>>> result;
    for (auto t = layout.layer_first_tensor[owner]; t < layout.layer_first_tensor[owner + 1]; ++t) {
      const auto numel = std::size_t(layout.tensor_numel[std::size_t(t)]);
      result.first.emplace_back(parameters_.data() + offset, numel);
      result.second.emplace_back(grads_.data() + offset, numel);
      offset += numel;
    }
    return result;
  }
  const Plan& plan_;
  std::vector<float> parameters_, grads_;
  LayerModel& model_;
};

void BM_EngineStepOverModelCompute(benchmark::State& state) {
  static const std::unique_ptr<Communicator> comm =
      make_mpi_communicator();  // one rank without mpirun
  testing::Gpt2Setup setup;
  setup.stage = int(state.range(0));
  setup.precision = Precision::Bf16;
  const Plan plan = testing::gpt2_plan(setup, comm->size());
  const Gpt2Options options{
      .micro_batch = setup.micro_batch,
      .seq_len = setup.seq_len,
      .activation_element_bytes = plan.request.config.precision.param_bytes()};
  MemoryLedger ledger, reference_ledger;
  Gpt2Model model(plan.request.model, options, ledger),
      reference_model(plan.request.model, options, reference_ledger);
  ZeroEngine engine(plan, *comm, model, ledger);
  ModelCompute reference(plan, engine.full_parameters(), reference_model);
  double step_seconds = 0, model_seconds = 0;
  std::int64_t step = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(engine.step(step++).loss);
    const auto middle = std::chrono::steady_clock::now();
    reference.run();
    const auto end = std::chrono::steady_clock::now();
    step_seconds += std::chrono::duration<double>(middle - start).count();
    model_seconds += std::chrono::duration<double>(end - middle).count();
    state.SetIterationTime(std::chrono::duration<double>(middle - start).count());
  }
  state.counters["per_model_compute"] = step_seconds / model_seconds;
  state.SetLabel("gpt2-tiny bf16, stage " + std::to_string(setup.stage));
}
BENCHMARK(BM_EngineStepOverModelCompute)
    ->Arg(0)
    ->Arg(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace zerolens::exec
