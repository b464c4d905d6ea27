#pragma once
// The MoE GPT-2 of the executor's tests: gpt2-tiny-moe without dropout (or other expert counts),
// and its layers run directly (no engine): the parameters one layer's forward and backward take,
// as the engine hands them (the tied head gets the embedding's).
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "exec/model/gpt2_model.hpp"
#include "sim/model/presets.hpp"

namespace zerolens::testing {

// gpt2-tiny-moe (4 experts, top-2, MoE in block 1) or, with `experts`, `top_k` and `sparse_step`,
// gpt2-tiny with those MoE blocks; no dropout (the executor trains without it).
inline Model tiny_moe_gpt2(int experts = 4, int top_k = 2, int sparse_step = 2) {
  TransformerShape shape = *model_from_preset("gpt2-tiny-moe").shape;
  shape.dropout = 0;
  shape.moe->experts = experts;
  shape.moe->top_k = top_k;
  shape.moe->sparse_step = sparse_step;
  return build_transformer("gpt2-tiny-moe", shape);
}

// Per layer, its parameter tensors' values (none for the tied head).
using LayerTensors = std::vector<std::vector<std::vector<float>>>;

inline LayerTensors zeros_like(const Model& model) {
  LayerTensors tensors(model.layers.size());
  for (std::size_t l = 0; l < model.layers.size(); ++l) {
    for (const TensorSpec& spec : model.layers[l].params)
      tensors[l].emplace_back(std::size_t(spec.numel()), 0.0f);
  }
  return tensors;
}

// The model's initial weights, tensor by tensor in sim's numbering.
inline LayerTensors initial_weights(const Model& model, const exec::LayerModel& layers) {
  LayerTensors tensors = zeros_like(model);
  std::int32_t id = 0;
  for (auto& layer : tensors) {
    for (auto& tensor : layer) layers.init_tensor(id++, tensor);
  }
  return tensors;
}

// The tensors layer `l` runs on: its own, or for a tied head the embedding's.
inline std::size_t owner(const Model& model, std::size_t l) {
  const int shared = model.layers[l].shares_params_of;
  return shared >= 0 ? std::size_t(shared) : l;
}

// One micro-batch's forward (and with `grads`, backward at `scale`): the mean loss.
inline double run_micro_batch(const Model& model, exec::LayerModel& layers, LayerTensors& weights,
                              LayerTensors* grads, std::int64_t first_sample, std::int64_t samples,
                              float scale = 1.0f) {
  std::vector<std::vector<std::span<const float>>> params(model.layers.size());
  std::vector<std::vector<std::span<float>>> grad_views(model.layers.size());
  for (std::size_t l = 0; l < model.layers.size(); ++l) {
    for (auto& tensor : weights[owner(model, l)]) params[l].emplace_back(tensor);
    if (grads) {
      for (auto& tensor : (*grads)[owner(model, l)]) grad_views[l].emplace_back(tensor);
    }
  }
  layers.load_batch(first_sample, samples);
  for (std::size_t l = 0; l < model.layers.size(); ++l) layers.forward(l, params[l]);
  const double loss = layers.loss();
  if (grads) {
    for (std::size_t l = model.layers.size(); l-- > 0;)
      layers.backward(l, params[l], grad_views[l], scale);
  }
  return loss;
}

}  // namespace zerolens::testing
