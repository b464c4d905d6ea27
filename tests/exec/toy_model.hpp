#pragma once
// A small layered model for engine tests: L dense layers of width D (tanh between them, linear
// last), the last layer tied to the first (it reuses layer 0's weight and bias, as a tied LM head
// reuses the embedding), trained by mean squared error to imitate a fixed teacher map on synthetic
// inputs that are a pure function of the sample id. The same maths in float64 is the reference.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "exec/model/layer_model.hpp"
#include "sim/model/model.hpp"

namespace zerolens::testing {

inline double unit_noise(std::uint64_t key) {  // splitmix64 -> [-1, 1)
  std::uint64_t z = key + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return double(z >> 11) / double(1ULL << 52) - 1.0;
}

struct ToyShape {
  int layers = 4;  // the last one is tied to the first
  int width = 8;
};

inline Model toy_sim_model(const ToyShape& shape) {
  Model model;
  model.name = "toy";
  model.source = "test";
  for (int l = 0; l < shape.layers; ++l) {
    Layer layer;
    layer.name = "dense" + std::to_string(l);
    if (l + 1 == shape.layers && l > 0) {
      layer.shares_params_of = 0;
    } else {
      layer.params.push_back({"weight", {shape.width, shape.width}});
      layer.params.push_back({"bias", {shape.width}});
    }
    model.layers.push_back(layer);
  }
  return model;
}

inline double toy_input(std::int64_t sample, int i, int width) { return unit_noise(std::uint64_t(sample * width + i)); }
inline double toy_teacher(int i, int j, int width) { return 0.6 * unit_noise(1'000'003ULL + std::uint64_t(i * width + j)); }
inline double toy_init(std::int32_t tensor, std::size_t i) {
  return tensor % 2 == 0 ? 0.4 * unit_noise(7'000'000ULL * std::uint64_t(tensor + 1) + i) : 0.0;
}

// The forward/backward maths, templated on the number type (float for the executor, double for the reference).
template <typename Real>
struct ToyMaths {
  int width;
  std::vector<std::vector<Real>> inputs, outputs;  // per layer: micro-batch x width
  std::vector<Real> targets;
  std::vector<Real> upstream;                      // gradient w.r.t. the output of the layer being differentiated

  void load(std::int64_t first, std::int64_t count, int layers) {
    inputs.assign(std::size_t(layers), {});
    outputs.assign(std::size_t(layers), {});
    std::vector<Real> x(std::size_t(count * width));
    targets.assign(x.size(), 0);
    for (std::int64_t s = 0; s < count; ++s) {
      for (int i = 0; i < width; ++i) x[std::size_t(s * width + i)] = Real(toy_input(first + s, i, width));
      for (int i = 0; i < width; ++i) {
        double y = 0;
        for (int j = 0; j < width; ++j) y += toy_teacher(i, j, width) * toy_input(first + s, j, width);
        targets[std::size_t(s * width + i)] = Real(y);
      }
    }
    inputs[0] = x;
  }

  std::size_t samples() const { return targets.size() / std::size_t(width); }

  void forward(std::size_t layer, const Real* weight, const Real* bias, bool last) {
    if (layer > 0) inputs[layer] = outputs[layer - 1];
    const auto& in = inputs[layer];
    auto& out = outputs[layer];
    out.assign(in.size(), 0);
    for (std::size_t s = 0; s < samples(); ++s) {
      for (int i = 0; i < width; ++i) {
        Real z = bias[i];
        for (int j = 0; j < width; ++j) z += weight[i * width + j] * in[s * std::size_t(width) + std::size_t(j)];
        out[s * std::size_t(width) + std::size_t(i)] = last ? z : std::tanh(z);
      }
    }
  }

  Real loss(std::size_t last) const {
    Real sum = 0;
    for (std::size_t k = 0; k < targets.size(); ++k) sum += (outputs[last][k] - targets[k]) * (outputs[last][k] - targets[k]);
    return Real(0.5) * sum / Real(targets.size());
  }

  void backward(std::size_t layer, const Real* weight, Real* dweight, Real* dbias, bool last, Real scale) {
    const auto& in = inputs[layer];
    const auto& out = outputs[layer];
    if (last) {
      upstream.assign(out.size(), 0);
      for (std::size_t k = 0; k < out.size(); ++k) upstream[k] = (out[k] - targets[k]) / Real(targets.size());
    }
    std::vector<Real> dinput(in.size(), 0);
    for (std::size_t s = 0; s < samples(); ++s) {
      for (int i = 0; i < width; ++i) {
        const std::size_t k = s * std::size_t(width) + std::size_t(i);
        const Real dz = last ? upstream[k] : upstream[k] * (1 - out[k] * out[k]);
        dbias[i] += scale * dz;
        for (int j = 0; j < width; ++j) {
          dweight[i * width + j] += scale * dz * in[s * std::size_t(width) + std::size_t(j)];
          dinput[s * std::size_t(width) + std::size_t(j)] += weight[i * width + j] * dz;
        }
      }
    }
    upstream = std::move(dinput);
  }
};

class ToyLayerModel final : public exec::LayerModel {
 public:
  explicit ToyLayerModel(const ToyShape& shape) : shape_(shape), maths_{shape.width, {}, {}, {}, {}} {}

  void init_tensor(std::int32_t tensor, std::span<float> values) const override {
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = float(toy_init(tensor, i));
  }
  void load_batch(std::int64_t first, std::int64_t count) override { maths_.load(first, count, shape_.layers); }
  void forward(std::size_t layer, exec::ParamViews params) override {
    maths_.forward(layer, params[0].data(), params[1].data(), last(layer));
  }
  void backward(std::size_t layer, exec::ParamViews params, exec::GradViews grads, float scale) override {
    maths_.backward(layer, params[0].data(), grads[0].data(), grads[1].data(), last(layer), scale);
  }
  double loss() const override { return maths_.loss(std::size_t(shape_.layers - 1)); }

 private:
  bool last(std::size_t layer) const { return layer + 1 == std::size_t(shape_.layers); }
  ToyShape shape_;
  ToyMaths<float> maths_;
};

}  // namespace zerolens::testing
