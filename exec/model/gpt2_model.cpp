// Gpt2Model: the layer steps (exec/model/gpt2_layers.hpp) on the CPU kernels, over ledger-tracked
// host buffers (architecture check, initial weights and corpus: exec/model/gpt2_shape.cpp).
#include "exec/model/gpt2_model.hpp"

#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/model/gpt2_layers.hpp"
#include "kernels/cpu.hpp"

namespace zerolens::exec {

namespace kn = zerolens::kernels;

// Gpt2Layers' backend on the host: TrackedBuffers (zero-filled) charged to the ledger's Gpu device
// as the plan's activations are, and the CPU kernels called as they are.
class CpuGpt2Backend {
 public:
  using Buffer = TrackedBuffer<float>;
  using Tokens = TrackedBuffer<std::int32_t>;
  static constexpr const char* kModelName = "Gpt2Model";
  static constexpr bool kTensorParallel = true;  // the TP layer steps (gpt2_layers.hpp)
  static constexpr bool kMixtureOfExperts = true;  // MoE blocks (exec/model/moe_layer.hpp)

  explicit CpuGpt2Backend(MemoryLedger& ledger) : ledger_(&ledger) {}

  Buffer buffer(Component component, std::size_t count, HeldAs held) const {
    return {*ledger_, Device::Gpu, component, count, held};
  }
  Tokens tokens(std::size_t count) const {
    return {*ledger_, Device::Gpu, Component::ActivationsStored, count};
  }
  static void upload(Tokens& to, std::span<const std::int32_t> host) {
    std::copy(host.begin(), host.end(), to.data());
  }
  static void fill(Buffer& buffer, float value) {
    std::fill(buffer.data(), buffer.data() + buffer.size(), value);
  }
  static std::vector<float> to_host(const Buffer& buffer) {
    return {buffer.data(), buffer.data() + buffer.size()};
  }
  static void copy(float* to, const float* from, std::size_t count) {
    std::copy_n(from, count, to);
  }

  // Column block `block` (0 q, 1 k, 2 v) of a fused [rows, 3 x width] tensor to or from a [rows,
  // width] one.
  static void copy_to_fused(float* fused, const float* part, std::size_t block, std::size_t rows,
                            std::size_t width) {
    for (std::size_t r = 0; r < rows; ++r)
      std::copy_n(part + r * width, width, fused + r * 3 * width + block * width);
  }
  static void copy_from_fused(float* part, const float* fused, std::size_t block, std::size_t rows,
                              std::size_t width) {
    for (std::size_t r = 0; r < rows; ++r)
      std::copy_n(fused + r * 3 * width + block * width, width, part + r * width);
  }

  // kernels/cpu.hpp's kernels, unchanged.
  template <typename... A>
  static void encoder_forward(A... a) {
    kn::encoder_forward(a...);
  }
  template <typename... A>
  static void encoder_backward(A... a) {
    kn::encoder_backward(a...);
  }
  template <typename... A>
  static void layernorm_forward(A... a) {
    kn::layernorm_forward(a...);
  }
  template <typename... A>
  static void layernorm_backward(A... a) {
    kn::layernorm_backward(a...);
  }
  template <typename... A>
  static void matmul_forward(A... a) {
    kn::matmul_forward(a...);
  }
  template <typename... A>
  static void matmul_backward(A... a) {
    kn::matmul_backward(a...);
  }
  template <typename... A>
  static void attention_forward(A... a) {
    kn::attention_forward(a...);
  }
  template <typename... A>
  static void attention_backward(A... a) {
    kn::attention_backward(a...);
  }
  template <typename... A>
  static void residual_forward(A... a) {
    kn::residual_forward(a...);
  }
  template <typename... A>
  static void gelu_forward(A... a) {
    kn::gelu_forward(a...);
  }
  template <typename... A>
  static void gelu_backward_inplace(A... a) {
    kn::gelu_backward_inplace(a...);
  }
  template <typename... A>
  static void crossentropy_softmax_forward(A... a) {
    kn::crossentropy_softmax_forward(a...);
  }
  template <typename... A>
  static void crossentropy_softmax_backward(A... a) {
    kn::crossentropy_softmax_backward(a...);
  }
  // Tensor parallelism's: the vocabulary part's embedding and loss, positions, a bias apart.
  template <typename... A>
  static void embedding_range_forward(A... a) {
    kn::embedding_range_forward(a...);
  }
  template <typename... A>
  static void embedding_range_backward(A... a) {
    kn::embedding_range_backward(a...);
  }
  template <typename... A>
  static void position_forward(A... a) {
    kn::position_forward(a...);
  }
  template <typename... A>
  static void position_backward(A... a) {
    kn::position_backward(a...);
  }
  template <typename... A>
  static void bias_forward(A... a) {
    kn::bias_forward(a...);
  }
  template <typename... A>
  static void bias_backward(A... a) {
    kn::bias_backward(a...);
  }
  template <typename... A>
  static void crossentropy_shard_max(A... a) {
    kn::crossentropy_shard_max(a...);
  }
  template <typename... A>
  static void crossentropy_shard_sums(A... a) {
    kn::crossentropy_shard_sums(a...);
  }
  template <typename... A>
  static void crossentropy_shard_finish(A... a) {
    kn::crossentropy_shard_finish(a...);
  }
  template <typename... A>
  static void crossentropy_shard_backward(A... a) {
    kn::crossentropy_shard_backward(a...);
  }

 private:
  MemoryLedger* ledger_;
};

struct Gpt2Model::State : Gpt2Layers<CpuGpt2Backend> {
  using Gpt2Layers::Gpt2Layers;
};

Gpt2Model::Gpt2Model(const Model& model, const Gpt2Options& options, MemoryLedger& ledger)
    : state_(std::make_unique<State>(model, options, ledger, gpt2_layout(model, options))) {}

Gpt2Model::~Gpt2Model() = default;

void Gpt2Model::init_tensor(std::int32_t tensor, std::span<float> values) const {
  gpt2_init_tensor(state_->model, state_->options.seed, tensor, values,
                   state_->options.tensor_parallel_rank, state_->options.expert_parallel_rank);
}

void Gpt2Model::connect_expert_parallel(Communicator& ep_group) {
  const Gpt2Dims& d = state_->dims;
  if (d.experts == 0)
    throw std::logic_error("Gpt2Model: '" + state_->model.name + "' has no MoE blocks");
  if (std::size_t(ep_group.size()) != d.ep || std::size_t(ep_group.rank()) != d.ep_rank) {
    throw std::logic_error("Gpt2Model: the EP group's rank " + std::to_string(ep_group.rank()) +
                           " of " + std::to_string(ep_group.size()) + " is not the share's " +
                           std::to_string(d.ep_rank) + " of " + std::to_string(d.ep));
  }
  state_->ep_group = &ep_group;
}

void Gpt2Model::connect_tensor_parallel(TensorParallelChannel& channel) {
  if (std::size_t(channel.size()) != state_->dims.tp ||
      std::size_t(channel.rank()) != state_->dims.tp_rank) {
    throw std::logic_error("Gpt2Model: the TP channel's rank " + std::to_string(channel.rank()) +
                           " of " + std::to_string(channel.size()) + " is not the shard's " +
                           std::to_string(state_->dims.tp_rank) + " of " +
                           std::to_string(state_->dims.tp));
  }
  state_->tp = &channel;
}

void Gpt2Model::load_batch(std::int64_t first_sample, std::int64_t count) {
  state_->load_batch(first_sample, count);
}

void Gpt2Model::forward(std::size_t layer, ParamViews params) {
  state_->forward(layer, params);
}

void Gpt2Model::recompute(std::size_t layer, ParamViews params) {
  state_->recompute(layer, params);
}

void Gpt2Model::backward(std::size_t layer, ParamViews params, GradViews grads, float scale) {
  state_->backward(layer, params, grads, scale);
}

void Gpt2Model::select_micro_batch(std::int32_t micro) {
  state_->select_micro_batch(micro);
}
std::span<float> Gpt2Model::receive_input(std::size_t layer) {
  return state_->receive_input(layer);
}
std::span<const float> Gpt2Model::output(std::size_t layer) {
  return state_->output(layer);
}
void Gpt2Model::release_output(std::size_t layer) {
  state_->release_output(layer);
}
std::span<float> Gpt2Model::receive_output_grad() {
  return state_->receive_output_grad();
}
std::span<const float> Gpt2Model::input_grad() {
  return state_->input_grad();
}
void Gpt2Model::release_input_grad() {
  state_->release_input_grad();
}

double Gpt2Model::loss() const {
  return state_->loss;
}

}  // namespace zerolens::exec
