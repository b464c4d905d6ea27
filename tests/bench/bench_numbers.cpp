// The engine's host element operations (exec/numbers.hpp: the CPU backend's casts, accumulation
// and gradient norm) against a memcpy of the same bytes, timed in the same run; the counter
// `per_memcpy` is the operation's time over memcpy's, so a slow path (a per-element call into the
// multi-threaded bulk casts, as once in get()) shows as a ratio, whatever the machine.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "exec/numbers.hpp"

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

}  // namespace
}  // namespace zerolens::exec
