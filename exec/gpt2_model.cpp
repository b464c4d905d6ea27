// Gpt2Model: construction, the batch and the per-layer dispatch (architecture check, initial
// weights and corpus: exec/gpt2_shape.cpp).
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "exec/gpt2_state.hpp"

namespace zerolens::exec {

Gpt2Model::State::State(const Model& model_, const Gpt2Options& options_, MemoryLedger& ledger_)
    : State(model_, options_, ledger_, gpt2_layout(model_, options_)) {}

Gpt2Model::State::State(const Model& model_, const Gpt2Options& options_, MemoryLedger& ledger_, Gpt2Layout layout)
    : model(model_), options(options_), ledger(ledger_), dims(layout.dims), roles(std::move(layout.roles)),
      corpus(options_.seed, std::int64_t(dims.vocab)) {
  outputs.resize(model.layers.size());
  blocks.resize(model.layers.size());
}

TrackedBuffer<float> Gpt2Model::State::zeroed_working(std::size_t count) {
  TrackedBuffer<float> buffer = working(count);
  std::fill(buffer.data(), buffer.data() + count, 0.0f);
  return buffer;
}

Gpt2Model::Gpt2Model(const Model& model, const Gpt2Options& options, MemoryLedger& ledger)
    : state_(std::make_unique<State>(model, options, ledger)) {}

Gpt2Model::~Gpt2Model() = default;

void Gpt2Model::init_tensor(std::int32_t tensor, std::span<float> values) const {
  gpt2_init_tensor(state_->model, state_->options.seed, tensor, values);
}

void Gpt2Model::load_batch(std::int64_t first_sample, std::int64_t count) {
  State& s = *state_;
  if (std::size_t(count) != s.dims.batch) throw std::logic_error("Gpt2Model: micro-batch differs from the plan's");
  s.tokens = {s.ledger, Device::Gpu, Component::ActivationsStored, s.dims.rows()};
  s.targets = {s.ledger, Device::Gpu, Component::ActivationsStored, s.dims.rows()};
  s.corpus.fill_batch(first_sample, s.dims.batch, s.dims.seq_len, s.tokens.span(), s.targets.span());
}

void Gpt2Model::forward(std::size_t layer, ParamViews params) { gpt2_forward(*state_, layer, params); }

void Gpt2Model::recompute(std::size_t layer, ParamViews params) { gpt2_recompute(*state_, layer, params); }

void Gpt2Model::backward(std::size_t layer, ParamViews params, GradViews grads, float scale) {
  gpt2_backward(*state_, layer, params, grads, scale);
}

double Gpt2Model::loss() const { return state_->loss; }

}  // namespace zerolens::exec
