// CudaMemorySpace: every element operation on GPU numbers gives the host's result bit for bit
// (exec/memory/numbers.cpp defines them), for every format and pair of formats; NumberBuffers in
// the space are charged to the ledger; the optimizer step equals Optimizer::update's host kernels.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_exec_test_support.hpp"
#include "exec/cuda/cuda_memory_space.hpp"
#include "exec/engine/optimizer.hpp"
#include "exec/memory/numbers.hpp"

namespace zerolens::exec {
namespace {

using Bits = std::vector<std::uint32_t>;  // one element each; 16-bit formats use the low half

constexpr NumberFormat kFormats[] = {NumberFormat::Fp32, NumberFormat::Fp16, NumberFormat::Bf16};

const char* format_name(NumberFormat format) {
  switch (format) {
    case NumberFormat::Fp32:
      return "fp32";
    case NumberFormat::Fp16:
      return "fp16";
    case NumberFormat::Bf16:
      return "bf16";
  }
  return "?";
}

std::uint32_t exponent_mask(NumberFormat format) {
  switch (format) {
    case NumberFormat::Fp32:
      return 0x7F800000u;
    case NumberFormat::Fp16:
      return 0x7C00u;
    case NumberFormat::Bf16:
      return 0x7F80u;
  }
  return 0;
}

bool is_nan(NumberFormat format, std::uint32_t bits) {
  const std::uint32_t exponent = exponent_mask(format);
  const std::uint32_t mantissa = format == NumberFormat::Fp32   ? 0x007FFFFFu
                                 : format == NumberFormat::Fp16 ? 0x03FFu
                                                                : 0x007Fu;
  return (bits & exponent) == exponent && (bits & mantissa) != 0;
}

// Finite fp32 values the 16-bit roundings treat specially: the fp16 overflow midpoint and largest
// value, the smallest fp16 normal and subnormal and the midpoints below them, 1.
constexpr float kBoundaries[] = {65520.0f, 65504.0f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 0x3p-26f, 1.0f};

// 32 random bits per call (std::mt19937's result type is wider than 32 bits on LP64).
class Random {
 public:
  explicit Random(std::uint32_t seed) : engine_(seed) {}
  std::uint32_t operator()() { return std::uint32_t(engine_()); }

 private:
  std::mt19937 engine_;
};

std::uint32_t random_exponent(Random& rng, int low, int high) {
  return std::uint32_t(127 + low + int(rng() % std::uint32_t(high - low + 1))) << 23;
}

// Rich in rounding cases: denormals and zeros, exact ties of the bf16 and fp16 roundings (with the
// kept lsb odd or even), a few ulps around kBoundaries; with `specials` also infinities and NaNs
// (quiet and signalling, any payload).
std::uint32_t random_fp32(Random& rng, bool specials) {
  const std::uint32_t sign = rng() & 0x80000000u;
  switch (rng() % 8) {
    case 0:
      return sign | (rng() & 0x007FFFFFu);
    case 1:
      return sign | random_exponent(rng, -30, 20) | (rng() & 0x007F0000u) | 0x8000u;
    case 2:
      return sign | random_exponent(rng, -26, 16) | (rng() & 0x007FE000u) | 0x1000u;
    case 3: {
      std::uint32_t bits = 0;
      const float boundary = kBoundaries[rng() % std::size(kBoundaries)];
      std::memcpy(&bits, &boundary, sizeof(bits));
      return sign | (bits + (rng() % 5) - 2);
    }
    case 4:
      if (specials) return sign | 0x7F800000u | (rng() % 3 == 0 ? 0u : rng() & 0x007FFFFFu);
      [[fallthrough]];
    default:
      return sign | random_exponent(rng, -20, 20) | (rng() & 0x007FFFFFu);
  }
}

// Any 16-bit pattern (zeros, subnormals, normals; infinities and NaNs only with `specials`).
std::uint32_t random_half(Random& rng, NumberFormat format, bool specials) {
  for (;;) {
    const std::uint32_t bits = rng() & 0xFFFFu;
    if (specials || (bits & exponent_mask(format)) != exponent_mask(format)) return bits;
  }
}

Bits random_bits(NumberFormat format, std::size_t count, std::uint32_t seed, bool specials) {
  Random rng(seed);
  Bits bits(count);
  for (auto& each : bits) {
    each = format == NumberFormat::Fp32 ? random_fp32(rng, specials)
                                        : random_half(rng, format, specials);
  }
  return bits;
}

// Finite values of moderate size, as parameters and gradients are.
Bits moderate_fp32(std::size_t count, std::uint32_t seed) {
  Random rng(seed);
  Bits bits(count);
  for (auto& each : bits)
    each = (rng() & 0x80000000u) | random_exponent(rng, -12, 1) | (rng() & 0x007FFFFFu);
  return bits;
}

std::string hex(std::uint32_t bits) {
  std::ostringstream out;
  out << "0x" << std::hex << bits;
  return out.str();
}

void* address(Numbers numbers) {
  return numbers.format() == NumberFormat::Fp32 ? static_cast<void*>(numbers.wide().data())
                                                : static_cast<void*>(numbers.narrow().data());
}

// Writes raw bit patterns into numbers on the host or in a space (no rounding on the way).
void store_bits(Numbers numbers, const Bits& bits) {
  ASSERT_EQ(bits.size(), numbers.size());
  std::vector<std::uint16_t> narrow(bits.begin(), bits.end());
  const void* source = numbers.format() == NumberFormat::Fp32
                           ? static_cast<const void*>(bits.data())
                           : static_cast<const void*>(narrow.data());
  const auto bytes = std::size_t(numbers.bytes());
  if (numbers.on_host()) {
    if (bytes > 0) std::memcpy(address(numbers), source, bytes);
  } else {
    numbers.space()->copy_from_host(address(numbers), source, bytes);
  }
}

Bits load_bits(Numbers numbers) {
  Bits wide(numbers.size());
  std::vector<std::uint16_t> narrow(numbers.size());
  void* target = numbers.format() == NumberFormat::Fp32 ? static_cast<void*>(wide.data())
                                                        : static_cast<void*>(narrow.data());
  const auto bytes = std::size_t(numbers.bytes());
  if (numbers.on_host()) {
    if (bytes > 0) std::memcpy(target, address(numbers), bytes);
  } else {
    numbers.space()->copy_to_host(target, address(numbers), bytes);
  }
  if (numbers.format() != NumberFormat::Fp32) wide.assign(narrow.begin(), narrow.end());
  return wide;
}

// Equal bits everywhere; with `any_nan`, a NaN matches any NaN (arithmetic on a NaN gives the
// GPU's canonical NaN where the CPU propagates the operand's payload).
void expect_same_bits(NumberFormat format, const Bits& host, const Bits& gpu, bool any_nan) {
  ASSERT_EQ(host.size(), gpu.size());
  std::size_t differences = 0;
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (host[i] == gpu[i] || (any_nan && is_nan(format, host[i]) && is_nan(format, gpu[i])))
      continue;
    if (++differences <= 8) {
      ADD_FAILURE() << format_name(format) << " element " << i << ": host " << hex(host[i])
                    << ", gpu " << hex(gpu[i]);
    }
  }
  EXPECT_EQ(differences, 0u) << "of " << host.size() << " elements";
}

// The same numbers in host memory (the ledger's cpu device) and in the GPU space.
struct Twin {
  NumberBuffer host;
  NumberBuffer gpu;
  Numbers host_view(std::size_t first, std::size_t count) const { return host.view(first, count); }
  Numbers gpu_view(std::size_t first, std::size_t count) const { return gpu.view(first, count); }
};

constexpr std::size_t kCount = 4099;  // several blocks and a ragged end
// The operations run on [kFirst, kFirst + kLength): a misaligned start, untouched ends.
constexpr std::size_t kFirst = 3;
constexpr std::size_t kLength = kCount - 5;

class CudaMemorySpaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_CUDA_DEVICE();
    ledger_.place(Device::Gpu, &space_);
  }
  void TearDown() override {
    if (IsSkipped()) return;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "an asynchronous CUDA error";
  }

  Twin twin(NumberFormat format, const Bits& bits) {
    Twin made{NumberBuffer(ledger_, Device::Cpu, Component::ParamsFull, format, bits.size()),
              NumberBuffer(ledger_, Device::Gpu, Component::ParamsFull, format, bits.size())};
    store_bits(made.host.view(), bits);
    store_bits(made.gpu.view(), bits);
    return made;
  }

  void expect_same(const Twin& twin, bool any_nan) {
    expect_same_bits(twin.host.format(), load_bits(twin.host.view()), load_bits(twin.gpu.view()),
                     any_nan);
  }

  // Three steps with fresh gradients each, the third on a misaligned view (the scalar path of the
  // fused Adam kernel; the first two take its vector path); 200003 elements span several chunks.
  void expect_optimizer_matches_host(const OptimizerConfig& config) {
    constexpr std::size_t kElements = 200003;
    Optimizer optimizer(config);
    const std::size_t states = optimizer.state_per_element();
    const Twin params = twin(NumberFormat::Fp32, moderate_fp32(kElements, 81));
    const Twin first = twin(NumberFormat::Fp32, Bits(states >= 1 ? kElements : 0, 0));
    const Twin second = twin(NumberFormat::Fp32, Bits(states >= 2 ? kElements : 0, 0));
    for (int step = 1; step <= 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const Twin grads =
          twin(NumberFormat::Fp32, moderate_fp32(kElements, 90 + std::uint32_t(step)));
      const std::size_t start = step == 3 ? 1 : 0, length = step == 3 ? kElements - 2 : kElements;
      const auto view = [&](const Twin& numbers, bool on_host) {
        if (numbers.host.size() == 0) return Numbers();  // a state this optimizer does not keep
        return on_host ? numbers.host_view(start, length) : numbers.gpu_view(start, length);
      };
      optimizer.begin_step();
      optimizer.update(view(params, true), view(grads, true), view(first, true),
                       view(second, true));
      optimizer.update(view(params, false), view(grads, false), view(first, false),
                       view(second, false));
      expect_same(params, /*any_nan=*/false);
      expect_same(first, /*any_nan=*/false);
      expect_same(second, /*any_nan=*/false);
    }
  }

  CudaMemorySpace space_{0};
  MemoryLedger ledger_;
};

// Without a device: what needs no CUDA call.

TEST(CudaMemorySpaceWithoutDevice, NameIsCudaAndTheDeviceIndex) {
  EXPECT_EQ(CudaMemorySpace(0).name(), "cuda:0");
  EXPECT_EQ(CudaMemorySpace(3).name(), "cuda:3");
  EXPECT_EQ(CudaMemorySpace(3).device(), 3);
}

TEST(CudaMemorySpaceWithoutDevice, EmptyNumbersAndZeroBytesNeedNoCudaCall) {
  CudaMemorySpace space(0);
  EXPECT_EQ(space.allocate(0), nullptr);
  space.deallocate(nullptr, 0);
  space.copy_to_host(nullptr, nullptr, 0);
  space.copy_from_host(nullptr, nullptr, 0);
  space.copy_within(nullptr, nullptr, 0);
  const Numbers wide(std::span<float>{}, &space);
  const Numbers narrow(std::span<std::uint16_t>{}, NumberFormat::Bf16, &space);
  space.convert(wide, narrow);
  space.add_scaled(narrow, wide, 2.0f);
  space.scale(narrow, 2.0f);
  space.fill_zero(wide);
  EXPECT_FALSE(space.has_inf_or_nan(narrow));
  EXPECT_EQ(space.sum_of_squares(wide), 0.0);
  Optimizer optimizer(OptimizerConfig{});
  optimizer.begin_step();
  space.optimizer_update(optimizer, wide, wide, wide, wide);
}

// The checks come before any CUDA call, so host memory stands in for device memory here.
TEST(CudaMemorySpaceWithoutDevice, MismatchedNumbersAreRejected) {
  CudaMemorySpace space(0), other(0);
  std::vector<float> four(4), three(3);
  std::vector<std::uint16_t> halves(4);
  const Numbers mine{std::span(four), &space}, shorter{std::span(three), &space};
  EXPECT_THROW(space.convert(mine, shorter), std::invalid_argument);
  EXPECT_THROW(space.add_scaled(shorter, mine, 1.0f), std::invalid_argument);
  EXPECT_THROW(space.scale(Numbers(std::span(four)), 1.0f), std::invalid_argument)
      << "host numbers";
  EXPECT_THROW(space.fill_zero(Numbers(std::span(four), &other)), std::invalid_argument)
      << "another space";
  EXPECT_THROW(space.convert(mine, Numbers(std::span(four), &other)), std::invalid_argument);
  Optimizer adam(OptimizerConfig{});
  adam.begin_step();
  const Numbers half{std::span(halves), NumberFormat::Fp16, &space};
  EXPECT_THROW(space.optimizer_update(adam, half, half, half, half), std::invalid_argument);
  EXPECT_THROW(space.optimizer_update(adam, mine, mine, mine, shorter), std::invalid_argument);
}

TEST(CudaMemorySpaceWithoutDevice, AllocationThrowsNamingTheCallAndTheBytesAndChargesNothing) {
  REQUIRE_NO_CUDA_DEVICE();
  CudaMemorySpace space(0);
  try {
    space.allocate(4096);
    FAIL() << "allocated without a device";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("cuda", 0), 0u) << message;
    EXPECT_NE(message.find("4096 bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("failed: "), std::string::npos) << message;
  }
  MemoryLedger ledger;
  ledger.place(Device::Gpu, &space);
  EXPECT_THROW(NumberBuffer(ledger, Device::Gpu, Component::ParamsFull, NumberFormat::Fp32, 1024),
               std::runtime_error);
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
  EXPECT_EQ(ledger.peak(Device::Gpu), 0);
}

// With a device.

TEST_F(CudaMemorySpaceTest, NumberBuffersAreZeroedAlignedAndChargedUntilReset) {
  NumberBuffer grads(ledger_, Device::Gpu, Component::GradsPartition, NumberFormat::Bf16, 1000);
  NumberBuffer master(ledger_, Device::Gpu, Component::MasterPartition, NumberFormat::Fp32, 300);
  EXPECT_EQ(ledger_.current(Device::Gpu, Component::GradsPartition), 2000);
  EXPECT_EQ(ledger_.current(Device::Gpu, Component::MasterPartition), 1200);
  EXPECT_EQ(ledger_.current(Device::Cpu), 0);
  EXPECT_EQ(grads.view().space(), &space_);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(address(grads.view())) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(address(master.view())) % 256, 0u);
  EXPECT_EQ(load_bits(grads.view()), Bits(1000, 0));
  EXPECT_EQ(load_bits(master.view()), Bits(300, 0));
  grads.reset();
  EXPECT_EQ(ledger_.current(Device::Gpu), 1200);
  EXPECT_EQ(grads.size(), 0u);
  master.reset();
  EXPECT_EQ(ledger_.current(Device::Gpu), 0);
  EXPECT_EQ(ledger_.peak(Device::Gpu), 3200);
}

TEST_F(CudaMemorySpaceTest, AFailedAllocationNamesCudaMallocAndTheBytesAndChargesNothing) {
  constexpr std::size_t kTooMany = std::size_t(1) << 50;  // 1 PiB
  try {
    space_.allocate(kTooMany);
    FAIL() << "allocated 1 PiB";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_EQ(
        message.rfind("cudaMalloc on cuda:0 of " + std::to_string(kTooMany) + " bytes failed: ", 0),
        0u)
        << message;
  }
  EXPECT_THROW(
      NumberBuffer(ledger_, Device::Gpu, Component::ParamsFull, NumberFormat::Fp32, kTooMany / 4),
      std::runtime_error);
  EXPECT_EQ(ledger_.current(Device::Gpu), 0);
}

TEST_F(CudaMemorySpaceTest, CopiesMoveTheBytesAndNumbersCopyBetweenHostAndDevice) {
  const Bits bits = random_bits(NumberFormat::Fp32, kCount, 1, /*specials=*/true);
  NumberBuffer a(ledger_, Device::Gpu, Component::ParamsFull, NumberFormat::Fp32, kCount);
  NumberBuffer b(ledger_, Device::Gpu, Component::ParamsFull, NumberFormat::Fp32, kCount);
  store_bits(a.view(), bits);
  space_.copy_within(address(b.view()), address(a.view()), kCount * sizeof(float));
  EXPECT_EQ(load_bits(b.view()), bits);

  // Numbers::copy_from between places: device to host in the same format, host to device rounded.
  std::vector<float> host(kCount);
  Numbers(std::span(host)).copy_from(a.view());
  EXPECT_EQ(load_bits(Numbers(std::span(host))), bits);
  NumberBuffer narrow(ledger_, Device::Gpu, Component::ParamsFull, NumberFormat::Fp16, kCount);
  narrow.view().copy_from(Numbers(std::span(host)));
  std::vector<std::uint16_t> expected(kCount);
  Numbers(std::span(expected), NumberFormat::Fp16).copy_from(Numbers(std::span(host)));
  expect_same_bits(NumberFormat::Fp16, Bits(expected.begin(), expected.end()),
                   load_bits(narrow.view()), false);
}

TEST_F(CudaMemorySpaceTest, ConvertMatchesTheHostForEveryPairOfFormats) {
  for (const NumberFormat to : kFormats) {
    for (const NumberFormat from : kFormats) {
      SCOPED_TRACE(std::string(format_name(from)) + " to " + format_name(to));
      const Twin source = twin(from, random_bits(from, kCount, 11, /*specials=*/true));
      const Twin target = twin(to, random_bits(to, kCount, 12, /*specials=*/true));
      target.host_view(kFirst, kLength).copy_from(source.host_view(kFirst, kLength));
      target.gpu_view(kFirst, kLength)
          .copy_from(source.gpu_view(kFirst, kLength));  // the space's convert
      expect_same(target, /*any_nan=*/false);            // no arithmetic: NaN payloads match too
    }
  }
}

TEST_F(CudaMemorySpaceTest, AddScaledMatchesTheHostForEveryPairOfFormats) {
  constexpr float kFactors[] = {1.0f, -0.5f, 0.1f, 3.0e-5f, 7.5e4f, 0.0f};
  for (const NumberFormat to : kFormats) {
    for (const NumberFormat from : kFormats) {
      for (const float factor : kFactors) {
        SCOPED_TRACE(std::string(format_name(to)) + " += " + std::to_string(factor) + " x " +
                     format_name(from));
        const Twin source = twin(from, random_bits(from, kCount, 21, /*specials=*/true));
        const Twin target = twin(to, random_bits(to, kCount, 22, /*specials=*/true));
        target.host_view(kFirst, kLength).add_scaled(source.host_view(kFirst, kLength), factor);
        target.gpu_view(kFirst, kLength).add_scaled(source.gpu_view(kFirst, kLength), factor);
        expect_same(target, /*any_nan=*/true);
      }
    }
  }
}

TEST_F(CudaMemorySpaceTest, AddScaledOfNumbersToThemselvesMatchesTheHost) {
  for (const NumberFormat format : kFormats) {
    SCOPED_TRACE(format_name(format));
    const Twin values = twin(format, random_bits(format, kCount, 31, /*specials=*/false));
    values.host.view().add_scaled(values.host.view(), 0.3f);
    values.gpu.view().add_scaled(values.gpu.view(), 0.3f);
    expect_same(values, /*any_nan=*/true);
  }
}

TEST_F(CudaMemorySpaceTest, ScaleMatchesTheHostForEveryFormat) {
  // 0x1p-20f makes fp32 denormals and fp16 underflows, 1e30f overflows.
  constexpr float kFactors[] = {0.5f, -3.7f, 1.0f / 65536.0f, 0x1p-20f, 1e30f, 0.0f, -0.0f};
  for (const NumberFormat format : kFormats) {
    for (const float factor : kFactors) {
      SCOPED_TRACE(std::string(format_name(format)) + " x " + std::to_string(factor));
      const Twin values = twin(format, random_bits(format, kCount, 41, /*specials=*/true));
      values.host_view(kFirst, kLength).scale(factor);
      values.gpu_view(kFirst, kLength).scale(factor);
      expect_same(values, /*any_nan=*/true);
    }
  }
}

TEST_F(CudaMemorySpaceTest, FillZeroClearsOnlyTheView) {
  for (const NumberFormat format : kFormats) {
    SCOPED_TRACE(format_name(format));
    const Twin values = twin(format, random_bits(format, kCount, 51, /*specials=*/true));
    values.host_view(kFirst, kLength).fill_zero();
    values.gpu_view(kFirst, kLength).fill_zero();
    expect_same(values, /*any_nan=*/false);
    EXPECT_EQ(load_bits(values.gpu_view(kFirst, kLength)), Bits(kLength, 0));
  }
}

// Every pattern with all exponent bits set (infinities, quiet and signalling NaNs of either sign)
// is found wherever it is, and only inside the view; the largest finite value is not.
TEST_F(CudaMemorySpaceTest, HasInfOrNanMatchesTheHost) {
  struct Case {
    NumberFormat format;
    std::vector<std::uint32_t> flagged;
    std::uint32_t largest_finite;
  };
  const Case cases[] = {
      {NumberFormat::Fp32,
       {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu},
       0x7F7FFFFFu},
      {NumberFormat::Fp16, {0x7C00u, 0xFC00u, 0x7E00u, 0x7C01u, 0xFFFFu}, 0x7BFFu},
      {NumberFormat::Bf16, {0x7F80u, 0xFF80u, 0x7FC0u, 0x7F81u, 0xFFFFu}, 0x7F7Fu},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(format_name(test.format));
    Bits bits = random_bits(test.format, kCount, 61, /*specials=*/false);
    bits[kCount / 2] = test.largest_finite;
    const Twin finite = twin(test.format, bits);
    EXPECT_FALSE(finite.host.view().has_inf_or_nan());
    EXPECT_FALSE(finite.gpu.view().has_inf_or_nan());
    for (const std::uint32_t special : test.flagged) {
      for (const std::size_t at : {std::size_t(0), kCount / 3, kCount - 1}) {
        SCOPED_TRACE(hex(special) + " at " + std::to_string(at));
        Bits with_special = bits;
        with_special[at] = special;
        const Twin values = twin(test.format, with_special);
        EXPECT_TRUE(values.host.view().has_inf_or_nan());
        EXPECT_TRUE(values.gpu.view().has_inf_or_nan());
        const std::size_t first = at == 0 ? 1 : 0;  // a view beside it
        const std::size_t length = at == 0 ? kCount - 1 : at;
        EXPECT_FALSE(values.host_view(first, length).has_inf_or_nan());
        EXPECT_FALSE(values.gpu_view(first, length).has_inf_or_nan());
      }
    }
  }
}

// Summed in another order than the host's loop: equal to a relative 1e-12. 300001 elements take
// every block of the first pass several times.
TEST_F(CudaMemorySpaceTest, SumOfSquaresMatchesTheHost) {
  for (const NumberFormat format : kFormats) {
    for (const std::size_t count :
         {std::size_t(1), std::size_t(1000), kCount, std::size_t(300001)}) {
      SCOPED_TRACE(std::string(format_name(format)) + ", " + std::to_string(count) + " elements");
      const Twin values = twin(format, random_bits(format, count, 71, /*specials=*/false));
      const double host = values.host.view().sum_of_squares();
      const double gpu = values.gpu.view().sum_of_squares();
      EXPECT_GT(host, 0.0);
      EXPECT_NEAR(gpu, host, 1e-12 * host);
      EXPECT_EQ(values.gpu.view().sum_of_squares(), gpu) << "repeatable";
    }
  }
  const Twin denormals = twin(NumberFormat::Fp32, Bits{0x00000001u, 0x80000003u, 0x00400000u});
  EXPECT_EQ(denormals.gpu.view().sum_of_squares(), denormals.host.view().sum_of_squares())
      << "exact squares";
}

TEST_F(CudaMemorySpaceTest, AdamMatchesTheHostBitForBit) {
  OptimizerConfig config;
  config.type = OptimizerType::Adam;
  config.weight_decay = 0.01;  // L2: added to the gradient
  expect_optimizer_matches_host(config);
}

TEST_F(CudaMemorySpaceTest, AdamWMatchesTheHostBitForBit) {
  OptimizerConfig config;
  config.type = OptimizerType::AdamW;
  config.lr = 3e-4;
  config.beta2 = 0.95;
  config.weight_decay = 0.1;  // decoupled
  expect_optimizer_matches_host(config);
}

TEST_F(CudaMemorySpaceTest, SgdWithMomentumMatchesTheHostBitForBit) {
  OptimizerConfig config;
  config.type = OptimizerType::Sgd;
  config.lr = 0.05;
  config.momentum = 0.9;
  config.weight_decay = 1e-4;
  expect_optimizer_matches_host(config);
}

TEST_F(CudaMemorySpaceTest, PlainSgdMatchesTheHostBitForBit) {
  OptimizerConfig config;
  config.type = OptimizerType::Sgd;
  config.lr = 0.05;
  expect_optimizer_matches_host(config);
}

}  // namespace
}  // namespace zerolens::exec
