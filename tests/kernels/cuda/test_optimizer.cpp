// The fused multi-tensor Adam and SGD against the CPU optimizer, bit for bit (same roundings), and
// Adam against the float64 reference.
#include "kernels/cuda/optimizer.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/precision.hpp"

namespace zerolens::kernels::cuda {
namespace {

using namespace zerolens::kernels::cuda::testing;  // cuda_test_support.hpp
using CudaAdam = CudaTest;
using CudaSgd = CudaTest;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Tensors laid out in one arena per array, as an executor's flat buffers are; `offsets[i]` is
// where tensor i starts: 64-element aligned (the vector path) except tensor 1, one element off
// (16-byte alignment broken: the scalar path).
struct Arena {
  std::vector<std::size_t> offsets;
  std::size_t size = 0;
};

Arena make_arena(const std::vector<std::size_t>& counts) {
  Arena arena;
  for (std::size_t count : counts) {
    arena.offsets.push_back(arena.size + (arena.offsets.size() == 1 ? 1 : 0));
    arena.size = (arena.offsets.back() + count + 63) / 64 * 64;
  }
  return arena;
}

std::uint16_t to_half(float value, HalfFormat format) {
  return format == HalfFormat::bf16 ? fp32_to_bf16(value) : fp32_to_fp16(value);
}
float from_half(std::uint16_t bits, GradFormat format) {
  return format == GradFormat::bf16 ? bf16_to_fp32(bits) : fp16_to_fp32(bits);
}

struct AdamCase {
  AdamConfig config;
  GradFormat grads;
  HalfFormat copy;
  int steps;
};

// Runs `steps` fused steps on the GPU and kernels::adam_step per tensor on the CPU; expects
// identical master weights, moments and 16-bit copies. Returns the GPU master weights.
std::vector<float> run_and_compare(const AdamCase& c, const std::vector<std::size_t>& counts,
                                   unsigned seed) {
  std::mt19937 rng(seed);
  const Arena arena = make_arena(counts);
  std::vector<float> master = random_floats(arena.size, rng, -2.0f, 2.0f);
  std::vector<float> m(arena.size, 0.0f), v(arena.size, 0.0f);
  DeviceBuffer<float> d_master = to_device(master), d_m = to_device(m), d_v = to_device(v);
  DeviceBuffer<float> d_grads32(arena.size);
  DeviceBuffer<std::uint16_t> d_grads16(arena.size),
      d_copy = to_device(std::vector<std::uint16_t>(arena.size, 0));
  std::vector<AdamTensor> tensors;
  for (std::size_t t = 0; t < counts.size(); ++t) {
    const std::size_t o = arena.offsets[t];
    const void* grads = c.grads == GradFormat::fp32
                            ? static_cast<const void*>(d_grads32.data() + o)
                            : static_cast<const void*>(d_grads16.data() + o);
    // The last tensor gets no 16-bit copy (nullptr): its copy region must stay untouched.
    std::uint16_t* copy = t + 1 == counts.size() ? nullptr : d_copy.data() + o;
    tensors.push_back(
        {d_master.data() + o, grads, d_m.data() + o, d_v.data() + o, copy, counts[t]});
  }
  std::vector<std::uint16_t> copy(arena.size, 0);
  for (int step = 1; step <= c.steps; ++step) {
    std::vector<float> grads = random_floats(arena.size, rng, -1.0f, 1.0f);
    if (c.grads == GradFormat::fp32) {
      d_grads32.upload(grads);
    } else {
      std::vector<std::uint16_t> half(arena.size);
      const HalfFormat format = c.grads == GradFormat::bf16 ? HalfFormat::bf16 : HalfFormat::fp16;
      for (std::size_t i = 0; i < arena.size; ++i) {
        half[i] = to_half(grads[i], format);
        grads[i] = from_half(half[i], c.grads);  // the CPU sees exactly what the GPU reads
      }
      d_grads16.upload(half);
    }
    adam_step_multi_tensor(tensors, c.grads, c.copy, c.config, step, nullptr);
    for (std::size_t t = 0; t < counts.size(); ++t) {
      const std::size_t o = arena.offsets[t];
      kernels::adam_step(master.data() + o, grads.data() + o, m.data() + o, v.data() + o, counts[t],
                         c.config, step);
      if (t + 1 < counts.size())
        for (std::size_t i = o; i < o + counts[t]; ++i) copy[i] = to_half(master[i], c.copy);
    }
  }
  const std::vector<float> gpu_master = d_master.download();
  EXPECT_TRUE(same_bits(gpu_master, master)) << "master weights";
  EXPECT_TRUE(same_bits(d_m.download(), m)) << "exp_avg";
  EXPECT_TRUE(same_bits(d_v.download(), v)) << "exp_avg_sq";
  EXPECT_EQ(d_copy.download(), copy) << "16-bit copies";
  return gpu_master;
}

TEST_F(CudaAdam, MultiTensorEqualsCpuAdamBitForBitInEveryFormat) {
  // Sizes: odd, tiny, several chunks with a tail, a single element.
  const std::vector<std::size_t> counts = {1003, 4, 2 * 65536 + 5, 1, 70001};
  for (const bool adam_w_mode : {true, false})
    for (const GradFormat grads : {GradFormat::fp32, GradFormat::bf16, GradFormat::fp16})
      for (const HalfFormat copy : {HalfFormat::bf16, HalfFormat::fp16}) {
        SCOPED_TRACE(std::string(adam_w_mode ? "AdamW" : "Adam") + " grads " +
                     std::to_string(int(grads)) + " copy " + std::to_string(int(copy)));
        const AdamConfig config{.lr = 0.01,
                                .beta1 = 0.9,
                                .beta2 = 0.95,
                                .eps = 1e-8,
                                .weight_decay = 0.1,
                                .adam_w_mode = adam_w_mode};
        run_and_compare({config, grads, copy, 3}, counts, 71);
      }
}

TEST_F(CudaAdam, ManyTensorsAndHugeTensorsSpanSeveralLaunches) {
  // 30 tensors (the launch table holds 24) and one tensor of more chunks than a launch has blocks.
  std::vector<std::size_t> counts;
  for (std::size_t t = 0; t < 30; ++t) counts.push_back(1 + t * 7919);
  counts.push_back(384 * 65536 + 123);
  const AdamConfig config{.lr = 1e-3, .weight_decay = 0.01, .adam_w_mode = true};
  run_and_compare({config, GradFormat::bf16, HalfFormat::bf16, 1}, counts, 72);
}

TEST_F(CudaAdam, MatchesTheFloat64ReferenceOverTenSteps) {
  const std::size_t count = 4099;
  const AdamConfig config{.lr = 0.01,
                          .beta1 = 0.9,
                          .beta2 = 0.999,
                          .eps = 1e-8,
                          .weight_decay = 0.1,
                          .adam_w_mode = true};
  std::mt19937 rng(73);
  std::vector<float> params = random_floats(count, rng, -2.0f, 2.0f);
  std::vector<double> p = to_double(params), m(count, 0.0), v(count, 0.0);
  DeviceBuffer<float> d_params = to_device(params),
                      d_m = to_device(std::vector<float>(count, 0.0f)),
                      d_v = to_device(std::vector<float>(count, 0.0f)), d_grads(count);
  const std::vector<AdamTensor> tensors = {
      {d_params.data(), d_grads.data(), d_m.data(), d_v.data(), nullptr, count}};
  for (int step = 1; step <= 10; ++step) {
    const std::vector<float> grads = random_floats(count, rng, -1.0f, 1.0f);
    d_grads.upload(grads);
    adam_step_multi_tensor(tensors, GradFormat::fp32, HalfFormat::bf16, config, step, nullptr);
    // Float64 AdamW as PyTorch documents it (see tests/kernels/test_optimizer.cpp).
    const double c1 = 1.0 - std::pow(config.beta1, step), c2 = 1.0 - std::pow(config.beta2, step);
    for (std::size_t i = 0; i < count; ++i) {
      p[i] *= 1.0 - config.lr * config.weight_decay;
      m[i] = config.beta1 * m[i] + (1.0 - config.beta1) * grads[i];
      v[i] = config.beta2 * v[i] + (1.0 - config.beta2) * double(grads[i]) * grads[i];
      p[i] -= config.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + config.eps);
    }
  }
  expect_close(d_params.download(), p, 1e-5, 1e-6, "params");
  expect_close(d_m.download(), m, 1e-5, 1e-7, "m");
  expect_close(d_v.download(), v, 1e-5, 1e-8, "v");
}

TEST(CudaOptimizerArguments, RejectedBeforeAnyDeviceWork) {
  EXPECT_THROW(
      adam_step_multi_tensor({}, GradFormat::fp32, HalfFormat::bf16, AdamConfig{}, 0, nullptr),
      std::invalid_argument);
  EXPECT_THROW(sgd_step(nullptr, nullptr, nullptr, 10, SgdConfig{.momentum = 0.9}, nullptr),
               std::invalid_argument);
}

TEST_F(CudaSgd, EqualsCpuSgdBitForBit) {
  for (const double momentum : {0.0, 0.9}) {
    std::mt19937 rng(74);
    const std::size_t count = 100003;
    const SgdConfig config{.lr = 0.05, .momentum = momentum, .weight_decay = 0.01};
    std::vector<float> params = random_floats(count, rng), buffer(count, 0.0f);
    DeviceBuffer<float> d_params = to_device(params), d_buffer = to_device(buffer), d_grads(count);
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> grads = random_floats(count, rng);
      d_grads.upload(grads);
      sgd_step(d_params.data(), d_grads.data(), d_buffer.data(), count, config, nullptr);
      kernels::sgd_step(params.data(), grads.data(), buffer.data(), count, config);
    }
    EXPECT_TRUE(same_bits(d_params.download(), params)) << "momentum " << momentum;
    EXPECT_TRUE(same_bits(d_buffer.download(), buffer)) << "momentum " << momentum;
  }
}

}  // namespace
}  // namespace zerolens::kernels::cuda
