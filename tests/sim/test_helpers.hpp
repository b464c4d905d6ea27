#pragma once
// Small builders shared by the simulator tests.
#include <string>
#include <vector>

#include "sim/config/config.hpp"
#include "sim/model/model.hpp"
#include "sim/plan/plan.hpp"

namespace zerolens::testing {

// A model of `tensors` generic layers, each owning one 1-D tensor of `elements_per_tensor`
// elements and keeping no activations: model states only, with exact sizes.
inline Model flat_model(int tensors, Elements elements_per_tensor) {
  Model model;
  model.name = "flat";
  model.source = "test";
  for (int i = 0; i < tensors; ++i) {
    Layer layer;
    layer.name = "layer" + std::to_string(i);
    layer.params.push_back({"w", {elements_per_tensor}});
    model.layers.push_back(layer);
  }
  return model;
}

// A GPT-style transformer of `layers` blocks, 4 heads, ffn = 4 x hidden, vocabulary 8 x hidden and
// positions 2 x hidden.
inline Model small_transformer(int layers, std::int64_t hidden, bool tied = true) {
  TransformerShape shape;
  shape.layers = layers;
  shape.hidden = hidden;
  shape.heads = 4;
  shape.kv_heads = 4;
  shape.ffn_hidden = 4 * hidden;
  shape.vocab = 8 * hidden;
  shape.max_positions = 2 * hidden;
  shape.tied_embeddings = tied;
  return build_transformer("small", shape);
}

// GPT-2 blocks of hidden 8, 2 heads, MLP 32, vocabulary 100 and 16 positions, tied embeddings: a
// block holds 872 parameters, small enough to work the parallelism tests' figures by hand.
inline TransformerShape hand_worked_shape(int blocks) {
  TransformerShape shape;
  shape.layers = blocks;
  shape.hidden = 8;
  shape.heads = 2;
  shape.kv_heads = 2;
  shape.ffn_hidden = 32;
  shape.vocab = 100;
  shape.max_positions = 16;
  return shape;
}

// Mixed-precision Adam (K = 12 bytes of optimizer state per parameter, as in the ZeRO paper).
inline TrainingConfig mixed_adam(int stage, Precision precision = Precision::Fp16) {
  TrainingConfig config;
  config.zero.stage = stage;
  config.precision.precision = precision;
  config.batch.micro_batch_per_gpu = 1;
  config.seq_len = 1;
  return config;
}

inline Cluster test_cluster(int gpus_per_node, Bytes gpu_memory = Bytes{80} << 30) {
  Cluster cluster;
  cluster.name = "test";
  cluster.gpu.name = "test-gpu";
  cluster.gpu.memory_bytes = gpu_memory;
  cluster.node.gpus_per_node = gpus_per_node;
  cluster.node.cpu_memory_bytes = Bytes{1} << 40;
  cluster.node.nvme_capacity_bytes = Bytes{1} << 44;
  cluster.node.intra_node = {"NVLink", 300e9, 5e-6};
  cluster.node.pcie = {"PCIe", 25e9, 10e-6};
  cluster.inter_node = {"InfiniBand", 25e9, 10e-6};
  return cluster;
}

inline Plan plan_of(const Model& model, const TrainingConfig& config, int dp_size, int gpus_per_node = 8,
                    bool model_states_only = false) {
  PlanRequest request;
  request.model = model;
  request.config = config;
  request.dp_size = dp_size;
  Cluster cluster = test_cluster(gpus_per_node);
  cluster.nodes = int(ceil_div(dp_size, gpus_per_node));
  request.cluster = cluster;
  request.options.model_states_only = model_states_only;
  return make_plan(request);
}

}  // namespace zerolens::testing
