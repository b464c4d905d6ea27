// CudaGpt2Model against Gpt2Model (the CPU reference), driven layer by layer as the ZeRO engine
// drives them: the same refusals, the same initial weights and batch, the same forward loss,
// gradients of every tensor, and the same activation figures in the ledger, with and without
// activation checkpointing, at fp32 and 16-bit activation accounting. Without a GPU the comparisons
// skip with the reason; the refusals (no CUDA call) run anyway.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_exec_test_support.hpp"
#include "exec/cuda/cuda_memory.hpp"
#include "exec/cuda/gpt2_cuda_model.hpp"
#include "exec/model/gpt2_model.hpp"
#include "sim/core/error.hpp"
#include "sim/model/presets.hpp"
#include "sim/schedule/memory_replay.hpp"

namespace zerolens::exec {
namespace {

Model tiny_gpt2() {
  TransformerShape shape = *model_from_preset("gpt2-tiny").shape;
  shape.dropout = 0;  // the executor trains without dropout
  return build_transformer("gpt2-tiny", shape);
}

// What an InputError says, or "" when none was thrown.
template <typename F>
std::string input_error(F&& construct) {
  try {
    construct();
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(Gpt2CudaModel, RefusesWhatTheCpuModelRefusesBeforeAnyCudaCall) {
  Model rmsnorm = tiny_gpt2();
  rmsnorm.shape->norm = NormKind::RmsNorm;
  rmsnorm = build_transformer("rmsnorm", *rmsnorm.shape);
  const std::vector<std::pair<Model, Gpt2Options>> refused = {
      {model_from_preset("llama2-7b"), {}},
      {model_from_preset("gpt2-tiny"), {}},  // dropout 0.1
      {tiny_gpt2(), {.seq_len = 129}},       // 128 positions
      {tiny_gpt2(), {.micro_batch = 0}},
      {rmsnorm, {}},
  };
  for (const auto& [model, options] : refused) {
    MemoryLedger cpu_ledger, gpu_ledger;
    const std::string cpu = input_error([&] { Gpt2Model(model, options, cpu_ledger); });
    const std::string gpu = input_error([&] { CudaGpt2Model(model, options, gpu_ledger); });
    EXPECT_FALSE(cpu.empty()) << model.name;
    EXPECT_EQ(gpu, cpu) << model.name;
    EXPECT_EQ(gpu_ledger.current(Device::Gpu), 0);
    EXPECT_EQ(gpu_ledger.scratch_current(Device::Gpu), 0);
  }
  // The MoE GPT-2 runs on the CPU model only: the CUDA model names itself and the model.
  TransformerShape moe = *model_from_preset("gpt2-tiny-moe").shape;
  moe.dropout = 0;
  MemoryLedger ledger;
  const std::string refusal =
      input_error([&] { CudaGpt2Model(build_transformer("gpt2-tiny-moe", moe), {}, ledger); });
  EXPECT_NE(refusal.find("does not run mixture-of-experts blocks"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("gpt2-tiny-moe"), std::string::npos) << refusal;
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
}

TEST(Gpt2CudaModel, WithoutADeviceConstructionThrowsAndChargesNothing) {
  REQUIRE_NO_CUDA_DEVICE();
  MemoryLedger ledger;
  EXPECT_THROW(CudaGpt2Model(tiny_gpt2(), {.micro_batch = 2, .seq_len = 16}, ledger), std::runtime_error);
  EXPECT_EQ(ledger.current(Device::Gpu), 0);
}

// ---- A layer-by-layer driver (the engine's order of calls) over host or device tensors. ----

std::size_t owner_of(const Model& model, std::size_t layer) {
  const int shared = model.layers[layer].shares_params_of;
  return shared >= 0 ? std::size_t(shared) : layer;
}

// Every owned tensor's initial values, per layer and parameter, from the model's init_tensor.
std::vector<std::vector<std::vector<float>>> initial_values(const Model& model, const LayerModel& net) {
  std::vector<std::vector<std::vector<float>>> values(model.layers.size());
  std::int32_t id = 0;
  for (std::size_t l = 0; l < model.layers.size(); ++l) {
    if (model.layers[l].shares_params_of >= 0) continue;
    for (const TensorSpec& tensor : model.layers[l].params) {
      values[l].emplace_back(std::size_t(tensor.numel()));
      net.init_tensor(id++, values[l].back());
    }
  }
  return values;
}

struct LedgerFigures {
  std::vector<Bytes> current;  // per activation component
  Bytes activations_high = 0, activations_at_peak = 0, peak = 0, scratch = 0, scratch_peak = 0;
  bool operator==(const LedgerFigures&) const = default;
};

constexpr Component kActivationComponents[] = {Component::ActivationsStored, Component::ActivationCheckpoints,
                                                Component::ActivationWorking};

// `constant` (the CUDA model's library workspace) is left out of the peak.
LedgerFigures figures(const MemoryLedger& ledger, Bytes constant) {
  LedgerFigures f;
  for (const Component c : kActivationComponents) f.current.push_back(ledger.current(Device::Gpu, c));
  const auto activations = std::size_t(Category::Activations);
  f.activations_high = ledger.category_highs(Device::Gpu)[activations];
  f.activations_at_peak = ledger.categories_at_peak(Device::Gpu)[activations];
  f.peak = ledger.peak(Device::Gpu) - constant;
  f.scratch = ledger.scratch_current(Device::Gpu);
  f.scratch_peak = ledger.scratch_peak(Device::Gpu);
  return f;
}

std::string to_string(const LedgerFigures& f) {
  std::string text = "current";
  for (const Bytes b : f.current) text += " " + std::to_string(b);
  return text + ", activations high " + std::to_string(f.activations_high) + " at peak " +
         std::to_string(f.activations_at_peak) + ", peak " + std::to_string(f.peak) + ", scratch " +
         std::to_string(f.scratch) + " peak " + std::to_string(f.scratch_peak);
}

struct StepResult {
  double loss = 0;
  LedgerFigures after_forward, after_backward;
  std::vector<std::vector<std::vector<float>>> grads;  // per owner layer and parameter (host)
};

// Views of one layer's tensors, wherever they live.
struct LayerViews {
  std::vector<std::span<const float>> params;
  std::vector<std::span<float>> grads;
};

// One micro-step: forward through every layer, then backward in reverse (recomputing blocks first
// when checkpointing), as the engine issues them; `views(owner)` gives a layer's tensors.
void run_step(const Model& model, LayerModel& net, const Gpt2Options& options, MemoryLedger& ledger, Bytes constant,
              const std::function<LayerViews(std::size_t)>& views, StepResult& result) {
  ledger.reset_peaks();
  net.load_batch(17, options.micro_batch);
  for (std::size_t l = 0; l < model.layers.size(); ++l) net.forward(l, views(owner_of(model, l)).params);
  result.loss = net.loss();
  result.after_forward = figures(ledger, constant);
  for (std::size_t l = model.layers.size(); l-- > 0;) {
    const LayerViews v = views(owner_of(model, l));
    if (options.checkpointing && model.layers[l].kind == LayerKind::TransformerBlock) net.recompute(l, v.params);
    net.backward(l, v.params, v.grads, 0.5f);  // as with 2 micro-steps of gradient accumulation
  }
  result.after_backward = figures(ledger, constant);
}

StepResult cpu_step(const Model& model, const Gpt2Options& options) {
  MemoryLedger ledger;
  Gpt2Model net(model, options, ledger);
  auto params = initial_values(model, net);
  StepResult result;
  result.grads = params;
  for (auto& layer : result.grads)
    for (auto& g : layer) std::fill(g.begin(), g.end(), 0.0f);
  run_step(model, net, options, ledger, 0, [&](std::size_t owner) {
    LayerViews v;
    for (std::size_t p = 0; p < params[owner].size(); ++p) {
      v.params.emplace_back(params[owner][p]);
      v.grads.emplace_back(result.grads[owner][p]);
    }
    return v;
  }, result);
  return result;
}

StepResult gpu_step(const Model& model, const Gpt2Options& options) {
  MemoryLedger ledger, tensors_ledger;  // the model's; the test's parameters and gradients
  CudaGpt2Model net(model, options, ledger);
  EXPECT_GE(net.library_workspace_bytes(), Bytes(1) << 20);
  EXPECT_EQ(ledger.current(Device::Gpu), net.library_workspace_bytes());
  const auto host = initial_values(model, net);
  std::vector<std::vector<DeviceBuffer<float>>> params(host.size()), grads(host.size());
  for (std::size_t l = 0; l < host.size(); ++l) {
    for (const auto& values : host[l]) {
      params[l].emplace_back(tensors_ledger, Component::ParamsFull, values.size());
      params[l].back().copy_from_host(values);
      grads[l].emplace_back(tensors_ledger, Component::GradsFull, values.size());  // zero-filled
    }
  }
  StepResult result;
  run_step(model, net, options, ledger, net.library_workspace_bytes(), [&](std::size_t owner) {
    LayerViews v;
    for (std::size_t p = 0; p < params[owner].size(); ++p) {
      v.params.emplace_back(params[owner][p].span());
      v.grads.emplace_back(grads[owner][p].span());
    }
    return v;
  }, result);
  result.grads = host;
  for (std::size_t l = 0; l < host.size(); ++l)
    for (std::size_t p = 0; p < host[l].size(); ++p) grads[l][p].copy_to_host(result.grads[l][p]);
  return result;
}

// fp32 on both sides, but cuBLAS and OpenBLAS (and the GPU's block reductions in LayerNorm, softmax
// and the bias sums) add in other orders: a tensor's gradient may differ by rounding, a few 1e-6 of
// its norm after a dozen layers. Documented bound: 1e-4 of the norm (L2), and no element off by
// more than 1e-3 of the tensor's largest magnitude.
constexpr double kGradRelativeL2 = 1e-4;
constexpr double kGradElementOfMax = 1e-3;
constexpr double kLossRelative = 1e-5;

void expect_close_grads(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::string& name) {
  double diff = 0, norm = 0, largest = 0, worst = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const double d = double(gpu[i]) - double(cpu[i]);
    diff += d * d;
    norm += double(cpu[i]) * double(cpu[i]);
    largest = std::max(largest, std::abs(double(cpu[i])));
    worst = std::max(worst, std::abs(d));
  }
  EXPECT_GT(norm, 0) << name << ": no gradient at all";
  EXPECT_LE(std::sqrt(diff), kGradRelativeL2 * std::sqrt(norm)) << name;
  EXPECT_LE(worst, kGradElementOfMax * largest) << name;
}

double l2_norm(const std::vector<std::vector<float>>& tensors) {
  double sum = 0;
  for (const auto& tensor : tensors)
    for (const float v : tensor) sum += double(v) * double(v);
  return std::sqrt(sum);
}

double l2_norm(const std::vector<float>& tensor) {
  return l2_norm(std::vector<std::vector<float>>{tensor});
}

// The key projection's bias has no gradient in exact arithmetic: it adds q.b_k to every score of a
// query's row, and the softmax cancels a constant added to a row. Both sides hold rounding noise
// there (an H200 showed 5e-11 against OpenBLAS's 4e-15, a layer's gradient norm being about 1e-1),
// which no relative bound on the tensor itself can compare; it is held negligible against its
// layer.
constexpr double kZeroGradientOfLayer = 1e-6;
bool zero_in_exact_arithmetic(const std::string& name) {
  return name.ends_with("k_proj.bias");
}

void expect_close_layer_grads(const std::vector<std::vector<float>>& gpu,
                              const std::vector<std::vector<float>>& cpu, const Layer& layer) {
  ASSERT_EQ(gpu.size(), cpu.size());
  const double layer_norm = l2_norm(cpu);
  for (std::size_t p = 0; p < cpu.size(); ++p) {
    const std::string& name = layer.params[p].name;
    if (zero_in_exact_arithmetic(name)) {
      EXPECT_LE(l2_norm(cpu[p]), kZeroGradientOfLayer * layer_norm) << name << " (cpu)";
      EXPECT_LE(l2_norm(gpu[p]), kZeroGradientOfLayer * layer_norm) << name << " (gpu)";
    } else {
      expect_close_grads(gpu[p], cpu[p], name);
    }
  }
}

struct Variant {
  bool checkpointing;
  std::int64_t activation_element_bytes;
};

void PrintTo(const Variant& v, std::ostream* out) {
  *out << (v.checkpointing ? "checkpointing, " : "stored, ") << v.activation_element_bytes << "-byte activations";
}

class Gpt2CudaAgainstCpu : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { REQUIRE_CUDA_DEVICE(); }
};

TEST_P(Gpt2CudaAgainstCpu, SameLossGradientsAndActivationMemory) {
  const Model model = tiny_gpt2();
  const Gpt2Options options{.micro_batch = 2, .seq_len = 32, .checkpointing = GetParam().checkpointing,
                            .activation_element_bytes = GetParam().activation_element_bytes};
  const StepResult cpu = cpu_step(model, options);
  const StepResult gpu = gpu_step(model, options);
  EXPECT_NEAR(cpu.loss, std::log(256.0), 0.2);  // about uniform at initialisation
  EXPECT_LE(std::abs(gpu.loss - cpu.loss), kLossRelative * std::abs(cpu.loss)) << gpu.loss << " vs " << cpu.loss;
  EXPECT_EQ(gpu.after_forward, cpu.after_forward)
      << "gpu: " << to_string(gpu.after_forward) << "\ncpu: " << to_string(cpu.after_forward);
  EXPECT_EQ(gpu.after_backward, cpu.after_backward)
      << "gpu: " << to_string(gpu.after_backward) << "\ncpu: " << to_string(cpu.after_backward);
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (std::size_t l = 0; l < cpu.grads.size(); ++l)
    expect_close_layer_grads(gpu.grads[l], cpu.grads[l], model.layers[l]);
}

INSTANTIATE_TEST_SUITE_P(Variants, Gpt2CudaAgainstCpu,
                         ::testing::Values(Variant{false, 4}, Variant{true, 4}, Variant{false, 2}, Variant{true, 2}),
                         [](const ::testing::TestParamInfo<Variant>& variant) {
                           return std::string(variant.param.checkpointing ? "Checkpointing" : "Stored") +
                                  (variant.param.activation_element_bytes == 4 ? "Fp32" : "SixteenBit");
                         });

// Activation checkpointing recomputes the same forward arithmetic: the same loss to the bit. The
// gradients agree within the bound above, not to the bit: the GPU's LayerNorm and bias-gradient
// kernels add their partial sums atomically, in no fixed order.
TEST(Gpt2CudaModel, CheckpointingRecomputesTheSameForward) {
  REQUIRE_CUDA_DEVICE();
  const Model model = tiny_gpt2();
  Gpt2Options options{.micro_batch = 2, .seq_len = 32};
  const StepResult plain = gpu_step(model, options);
  options.checkpointing = true;
  const StepResult checkpointed = gpu_step(model, options);
  EXPECT_EQ(checkpointed.loss, plain.loss);
  for (std::size_t l = 0; l < plain.grads.size(); ++l) {
    expect_close_layer_grads(checkpointed.grads[l], plain.grads[l], model.layers[l]);
  }
}

}  // namespace
}  // namespace zerolens::exec
