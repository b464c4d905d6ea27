// LoRA and QLoRA (issue 21): the adapters' parameter counts against PEFT's, bitsandbytes' 4-bit
// bytes against the QLoRA paper's formula, and a tiny model's frozen and trainable states worked
// by hand through the schedule at stages 0, 2 and 3.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "sim/model/layers_json.hpp"
#include "sim/model/lora.hpp"
#include "sim/model/presets.hpp"
#include "sim/plan/variants.hpp"
#include "sim/schedule/memory_replay.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

Model with_adapters(const Model& model, int rank, std::vector<std::string> targets = {},
                    WeightFormat base = WeightFormat::TrainingDtype, double dropout = 0) {
  return with_lora(
      model,
      LoraConfig{
          .rank = rank, .targets = std::move(targets), .base_format = base, .dropout = dropout});
}

// PEFT's get_peft_model(...).print_trainable_parameters() for Llama-2-7b with r=8 on q_proj and
// v_proj prints "trainable params: 4,194,304 || all params: 6,742,609,920": 32 layers x 2 modules
// x r x (in + out) = 32 x 2 x 8 x (4096 + 4096). All linear layers at r=16: per layer r x (4 x
// (4096 + 4096) + 2 x (4096 + 11008) + (11008 + 4096)). GPT-2's default c_attn (one fused adapter
// over q, k, v): 12 x 8 x (768 + 2304) = 294,912.
TEST(LoraParameters, PeftCountsByFormula) {
  const Model llama = model_from_preset("llama2-7b");
  const Elements base = 6'738'415'616;
  ASSERT_EQ(llama.parameter_count(), base);
  const Model r8 = with_adapters(llama, 8);
  EXPECT_EQ(r8.trainable_parameter_count(), 32 * 2 * 8 * (4096 + 4096));
  EXPECT_EQ(r8.trainable_parameter_count(), 4'194'304);
  EXPECT_EQ(r8.parameter_count(), 6'742'609'920);
  EXPECT_EQ(with_adapters(llama, 16).trainable_parameter_count(), 32 * 2 * 16 * (4096 + 4096));
  const Elements all_linear_per_layer =
      16 * (4 * (4096 + 4096) + 2 * (4096 + 11008) + (11008 + 4096));
  EXPECT_EQ(with_adapters(llama, 16, {"all-linear"}).trainable_parameter_count(),
            32 * all_linear_per_layer);
  EXPECT_EQ(32 * all_linear_per_layer, 39'976'960);
  const Model gpt2 = with_adapters(model_from_preset("gpt2-124m"), 8);
  EXPECT_EQ(gpt2.trainable_parameter_count(), 12 * 8 * (768 + 2304));
  EXPECT_EQ(gpt2.trainable_parameter_count(), 294'912);
  // Every base tensor is frozen; every adapter trains.
  for (const Layer& layer : r8.layers) {
    for (const TensorSpec& tensor : layer.params) {
      EXPECT_EQ(tensor.trainable, tensor.name.find(".lora_") != std::string::npos) << tensor.name;
    }
  }
  EXPECT_EQ(lora_summary(r8),
            "LoRA r=8 on q_proj, v_proj: 4,194,304 trainable of 6,742,609,920 parameters "
            "(0.0622 %)");
}

// GPT-2's c_proj names two modules, told apart as PEFT's dotted names do; Phi-3 fuses q, k, v.
TEST(LoraParameters, FusedAndAmbiguousModules) {
  const Model gpt2 = model_from_preset("gpt2-124m");
  EXPECT_EQ(with_adapters(gpt2, 4, {"c_proj"}).trainable_parameter_count(),
            12 * 4 * ((768 + 768) + (3072 + 768)));
  EXPECT_EQ(with_adapters(gpt2, 4, {"mlp.c_proj"}).trainable_parameter_count(),
            12 * 4 * (3072 + 768));
  EXPECT_EQ(lora_adapted_modules(*with_adapters(gpt2, 4, {"c_proj"}).shape),
            (std::vector<std::string>{"attn.c_proj", "mlp.c_proj"}));
  const Model phi3 = with_adapters(model_from_preset("phi3-mini"), 8);  // default qkv_proj
  EXPECT_EQ(phi3.trainable_parameter_count(), 32 * 8 * (3072 + 3 * 3072));
}

// bitsandbytes' quantize_4bit, blocksize 64: a 4096 x 4096 weight keeps 8,388,608 bytes of codes
// and, with double quantization, 262,144 uint8 absmax + 1,024 fp32 second-level absmax (one per 256
// blocks): 4 + 8/64 + 32/(64 x 256) = 4.126953125 bits a parameter, the QLoRA paper's 0.127 bits of
// constants; without it 262,144 fp32 absmax, 4.5 bits. Each tensor also keeps its 16-entry fp32
// NF4 code and (double quantization) the fp32 offset: 64 + 4 bytes.
TEST(Nf4, BytesPerParameterAsTheQloraPaper) {
  const Elements n = 4096 * 4096;
  EXPECT_EQ(stored_elements(n, WeightFormat::Nf4DoubleQuant, 2) * 2, n / 2);
  EXPECT_EQ(stored_elements(n, WeightFormat::Nf4DoubleQuant, 4) * 4, n / 2);
  EXPECT_EQ(stored_elements(n, WeightFormat::TrainingDtype, 2), n);
  const Bytes double_quant = quantization_state_bytes(n, WeightFormat::Nf4DoubleQuant);
  EXPECT_EQ(double_quant, 262'144 + 1'024 * 4 + 4 + 64);
  EXPECT_DOUBLE_EQ(8.0 * double(n / 2 + double_quant - 68) / double(n),
                   4 + 8.0 / 64 + 32.0 / (64 * 256));
  const Bytes single = quantization_state_bytes(n, WeightFormat::Nf4);
  EXPECT_EQ(single, 262'144 * 4 + 64);
  EXPECT_DOUBLE_EQ(8.0 * double(n / 2 + single - 64) / double(n), 4.5);
  // A block count that does not fill the second level: 100 blocks, one fp32 absmax.
  EXPECT_EQ(quantization_state_bytes(6400, WeightFormat::Nf4DoubleQuant), 100 + 4 + 4 + 64);
  EXPECT_EQ(quantization_state_bytes(n, WeightFormat::TrainingDtype), 0);
}

// Two LLaMA-style blocks of hidden 64, 4 heads, MLP 128, vocabulary 256, untied. Parameters: a
// block 2 x 64 (norms) + 4 x 64 x 64 (q, k, v, o) + 3 x 64 x 128 (gate, up, down) = 41,088; the
// model 2 x 41,088 + 256 x 64 (embedding) + 64 (final norm) + 256 x 64 (head) = 115,008. LoRA r=4
// on q_proj, v_proj: 2 blocks x 2 x 4 x (64 + 64) = 2,048 trainable.
TransformerShape tiny_shape() {
  TransformerShape s;
  s.family = "llama";
  s.layers = 2;
  s.hidden = 64;
  s.heads = 4;
  s.kv_heads = 4;
  s.ffn_hidden = 128;
  s.vocab = 256;
  s.max_positions = 128;
  s.learned_positions = false;
  s.tied_embeddings = false;
  s.qkv_bias = s.out_proj_bias = s.mlp_bias = false;
  s.norm = NormKind::RmsNorm;
  s.mlp = MlpKind::SwiGlu;
  s.dropout = 0;
  return s;
}

Model tiny(WeightFormat base = WeightFormat::TrainingDtype, double dropout = 0) {
  TransformerShape s = tiny_shape();
  s.lora = {.rank = 4, .targets = {}, .base_format = base, .dropout = dropout};
  return build_transformer("tiny", s);
}

Bytes resident(const Schedule& schedule, Component component) {
  Bytes total = 0;
  for (const MemEffect& effect : schedule.resident) {
    if (effect.component == component) total += effect.bytes;
  }
  return total;
}

TEST(LoraSchedule, TinyModelStatesWorkedByHand) {
  const Model full = build_transformer("tiny", tiny_shape());
  const Model lora = tiny();
  ASSERT_EQ(full.parameter_count(), 115'008);
  ASSERT_EQ(lora.parameter_count(), 115'008 + 2'048);
  ASSERT_EQ(lora.trainable_parameter_count(), 2'048);

  // Stage 0, one GPU, bf16 with Adam: every parameter in bf16, the adapters' fp32 master (4 B),
  // Adam moments (8 B) and bf16 gradients (2 B).
  const Plan s0 = testing::plan_of(lora, testing::mixed_adam(0, Precision::Bf16), 1, 8, true);
  EXPECT_EQ(resident(s0.schedule, Component::ParamsFull), 117'056 * 2);
  EXPECT_EQ(resident(s0.schedule, Component::MasterPartition), 2'048 * 4);
  EXPECT_EQ(resident(s0.schedule, Component::OptimizerStatePartition), 2'048 * 8);
  const auto highs = category_highs(s0.schedule)[std::size_t(Device::Gpu)];
  EXPECT_EQ(highs[std::size_t(Category::Grads)], 2'048 * 2);
  // Full fine-tuning of the same model: 16 bytes a parameter.
  const Plan f0 = testing::plan_of(full, testing::mixed_adam(0, Precision::Bf16), 1, 8, true);
  EXPECT_EQ(resident(f0.schedule, Component::MasterPartition), 115'008 * 4);
  EXPECT_EQ(category_highs(f0.schedule)[0][std::size_t(Category::Grads)], 115'008 * 2);

  // Stage 2 over 4 ranks: the flat partition is the adapters' (DeepSpeed's bit16_groups hold
  // parameters that require grad): 2,048 / 4 = 512 elements of master, moments and gradients.
  const Plan s2 = testing::plan_of(lora, testing::mixed_adam(2, Precision::Bf16), 4, 8, true);
  EXPECT_EQ(s2.schedule.layout.flat_partition, 512);
  EXPECT_EQ(s2.schedule.layout.owned, 512);
  EXPECT_EQ(resident(s2.schedule, Component::ParamsFull), 117'056 * 2);
  EXPECT_EQ(resident(s2.schedule, Component::MasterPartition), 512 * 4);
  EXPECT_EQ(resident(s2.schedule, Component::OptimizerStatePartition), 512 * 8);
  EXPECT_EQ(category_highs(s2.schedule)[0][std::size_t(Category::Grads)], 512 * 2);
  // Its gradients are reduce-scattered and its parameters all-gathered: 2,048 bf16 each.
  EXPECT_EQ(s2.comm.collectives[std::size_t(OpKind::ReduceScatter)].bytes, 2'048 * 2);
  EXPECT_EQ(s2.comm.collectives[std::size_t(OpKind::AllGather)].bytes, 2'048 * 2);

  // Stage 3 over 4 ranks (no persistent tensors): every tensor, frozen too, partitioned (117,056
  // / 4 = 29,264 elements) and gathered for its forward; the 8 adapter tensors' partitions (64
  // elements each) are the rank's optimizer partition.
  TrainingConfig z3 = testing::mixed_adam(3, Precision::Bf16);
  z3.zero.stage3_param_persistence_threshold = 0;
  const Plan s3 = testing::plan_of(lora, z3, 4, 8, true);
  EXPECT_EQ(resident(s3.schedule, Component::ParamsPartition), 29'264 * 2);
  EXPECT_EQ(s3.schedule.layout.owned, 8 * 64);
  EXPECT_EQ(resident(s3.schedule, Component::MasterPartition), 512 * 4);
  EXPECT_EQ(resident(s3.schedule, Component::GradsPartition), 512 * 2);
  Bytes forward_gathers = 0;
  for (const Op& op : s3.schedule.ops) {
    if (op.kind == OpKind::AllGather && op.phase == Phase::Forward) forward_gathers += op.bytes;
  }
  EXPECT_EQ(forward_gathers, 117'056 * 2);
  EXPECT_EQ(s3.comm.collectives[std::size_t(OpKind::ReduceScatter)].bytes, 2'048 * 2);
  // Only adapters are reduced.
  for (const Bucket& bucket : s3.schedule.buckets) {
    for (const auto tensor : s3.schedule.tensors_of(bucket))
      EXPECT_TRUE(s3.schedule.layout.tensor_trainable[std::size_t(tensor)]);
  }
}

// QLoRA's tiny model: the 14 block weights in NF4 with double quantization. A 64 x 64 weight keeps
// 4,096 / 2 = 2,048 bytes of codes (1,024 bf16 quant_storage elements) and 64 uint8 absmax + 4
// (one second-level fp32 absmax) + 4 (offset) + 64 (code) = 136 bytes of constants; a 64 x 128
// one 4,096 and 128 + 4 + 4 + 64 = 200. A block: 4 x 1,024 + 3 x 2,048 + 128 (norms) + 1,024
// (adapters) = 11,392 elements; the model 2 x 11,392 + 16,384 + 64 + 16,384 = 55,616 bf16 elements
// = 111,232 bytes, and 2 x (4 x 136 + 3 x 200) = 2,288 bytes of constants on every rank.
TEST(LoraSchedule, QloraBaseBytesWorkedByHand) {
  const Model qlora = tiny(WeightFormat::Nf4DoubleQuant);
  const Plan s0 = testing::plan_of(qlora, testing::mixed_adam(0, Precision::Bf16), 1, 8, true);
  EXPECT_EQ(resident(s0.schedule, Component::ParamsFull), 111'232);
  EXPECT_EQ(resident(s0.schedule, Component::ParamsQuantizationState), 2'288);
  EXPECT_EQ(resident(s0.schedule, Component::MasterPartition), 2'048 * 4);
  // Stage 3: the codes partitioned as bf16 elements (55,616 / 4), the constants whole.
  TrainingConfig z3 = testing::mixed_adam(3, Precision::Bf16);
  z3.zero.stage3_param_persistence_threshold = 0;
  const Plan s3 = testing::plan_of(qlora, z3, 4, 8, true);
  EXPECT_EQ(resident(s3.schedule, Component::ParamsPartition), 55'616 / 4 * 2);
  EXPECT_EQ(resident(s3.schedule, Component::ParamsQuantizationState), 2'288);
  Bytes forward_gathers = 0;
  for (const Op& op : s3.schedule.ops) {
    if (op.kind == OpKind::AllGather && op.phase == Phase::Forward) forward_gathers += op.bytes;
  }
  EXPECT_EQ(forward_gathers, 111'232);
}

// Each block's forward and backward (and recompute) dequantize its weights one at a time: the
// largest, 64 x 128, is a 16,384-byte bf16 transient; the embedding and head are not quantized.
TEST(LoraSchedule, DequantizedWeightAroundEachBlockMatmul) {
  const Plan plan = testing::plan_of(tiny(WeightFormat::Nf4DoubleQuant),
                                     testing::mixed_adam(0, Precision::Bf16), 1);
  std::map<std::pair<int, OpKind>, Bytes> transient;
  for (const Op& op : plan.schedule.ops) {
    for (const MemEffect& effect : plan.schedule.effects_of(op)) {
      if (effect.component == Component::DequantizedWeight && effect.bytes > 0)
        transient[{op.layer, op.kind}] += effect.bytes;
    }
  }
  const std::map<std::pair<int, OpKind>, Bytes> expected = {{{1, OpKind::Forward}, 16'384},
                                                            {{1, OpKind::Backward}, 16'384},
                                                            {{2, OpKind::Forward}, 16'384},
                                                            {{2, OpKind::Backward}, 16'384}};
  EXPECT_EQ(transient, expected);
}

// A frozen linear keeps no input (its weight has no gradient to compute): the block of 4h + (q +
// k) + v + q + 4f = 256 + 128 + 64 + 64 + 512 = 1,024 elements a token loses o_proj's input (64),
// the MLP's input (64) and down_proj's (128); q_proj's and v_proj's input stays (lora_A reads it),
// and each adapter keeps its 4-wide intermediate: 1,024 - 256 + 8 = 776. With lora_dropout each
// adapter keeps its dropout's output (64) and mask (64 bytes) instead of sharing the input:
// 1,024 - 320 + 2 x (4 + 64) = 840 elements and 128 mask bytes.
TEST(LoraActivations, FrozenLinearsKeepNoInputWorkedByHand) {
  const Model full = build_transformer("tiny", tiny_shape());
  ASSERT_DOUBLE_EQ(full.layers[1].activations.elements, 1'024);
  EXPECT_DOUBLE_EQ(tiny().layers[1].activations.elements, 776);
  const Layer dropped = tiny(WeightFormat::TrainingDtype, 0.1).layers[1];
  EXPECT_DOUBLE_EQ(dropped.activations.elements, 840);
  EXPECT_DOUBLE_EQ(dropped.activations.mask_bytes, 128);
  // The frozen head keeps its logits but not its input; the frozen embedding nothing for backward.
  EXPECT_DOUBLE_EQ(
      full.layers.back().activations.elements - tiny().layers.back().activations.elements, 64);
  EXPECT_DOUBLE_EQ(tiny().layers.front().activations.fixed_bytes, 0);
}

// Backward computes a frozen matmul's input gradient only: per token a block's base weights
// 2 x (64 x 192 + 64 x 64 + 3 x 64 x 128) = 81,920 forward FLOPs, the adapters 2 x 2 x 4 x 128 =
// 2,048, attention 4 x 64 per position: forward 84,224 at s = 1, backward 2 x 84,224 - 81,920.
TEST(LoraFlops, FrozenMatmulsSkipTheirWeightGradient) {
  const Layer block = tiny().layers[1];
  EXPECT_DOUBLE_EQ(block.frozen_matmul_flops_per_token, 81'920);
  EXPECT_DOUBLE_EQ(block.matmul_flops_per_token, 81'920 + 2'048);
  EXPECT_DOUBLE_EQ(block.forward_flops(1, 1), 84'224);
  EXPECT_DOUBLE_EQ(block.backward_flops(1, 1), 2 * 84'224 - 81'920);
  const Layer trained = build_transformer("tiny", tiny_shape()).layers[1];
  EXPECT_DOUBLE_EQ(trained.backward_flops(1, 1), 2 * trained.forward_flops(1, 1));
}

// The layer list written for a LoRA model (a trace's recorded model) reads back the same: the
// frozen flags, the formats and the shape's LoRA, which TP and PP rebuild from.
TEST(LoraModelJson, RoundTrip) {
  const Model qlora = tiny(WeightFormat::Nf4DoubleQuant, 0.05);
  Diagnostics diagnostics;
  const Model back = model_from_layers_json(model_to_json(qlora), diagnostics, "tiny.json");
  EXPECT_TRUE(diagnostics.warnings.empty());
  ASSERT_TRUE(back.shape);
  EXPECT_EQ(back.shape->lora.rank, 4);
  EXPECT_EQ(back.shape->lora.base_format, WeightFormat::Nf4DoubleQuant);
  EXPECT_DOUBLE_EQ(back.shape->lora.dropout, 0.05);
  EXPECT_EQ(back.trainable_parameter_count(), 2'048);
  ASSERT_EQ(back.layers.size(), qlora.layers.size());
  for (std::size_t l = 0; l < back.layers.size(); ++l) {
    ASSERT_EQ(back.layers[l].params.size(), qlora.layers[l].params.size());
    for (std::size_t t = 0; t < back.layers[l].params.size(); ++t) {
      EXPECT_EQ(back.layers[l].params[t].trainable, qlora.layers[l].params[t].trainable);
      EXPECT_EQ(back.layers[l].params[t].format, qlora.layers[l].params[t].format);
    }
    EXPECT_DOUBLE_EQ(back.layers[l].frozen_matmul_flops_per_token,
                     qlora.layers[l].frozen_matmul_flops_per_token);
  }
  auto document = model_to_json(qlora);
  document["transformer"]["lora"]["targets"] = {"q_projj"};
  try {
    model_from_layers_json(document, diagnostics, "tiny.json");
    FAIL() << "an unknown target was read";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "tiny.json.transformer.lora.targets");
    EXPECT_NE(std::string(error.what()).find("did you mean 'q_proj'"), std::string::npos);
  }
}

std::string refusal(const Model& model, const TrainingConfig& config, int dp = 4) {
  try {
    testing::plan_of(model, config, dp);
  } catch (const InputError& error) {
    return error.where();
  }
  return "";
}

TEST(LoraRefusals, WhatIsNotModelledIsNamed) {
  EXPECT_THROW(with_adapters(model_from_preset("llama2-7b"), 8, {"c_attn"}), InputError);
  EXPECT_THROW(with_adapters(testing::flat_model(2, 10), 8), InputError);
  TrainingConfig fsdp = testing::mixed_adam(3, Precision::Bf16);
  fsdp.framework = Framework::Fsdp2;
  EXPECT_EQ(refusal(tiny(), fsdp), "--lora-rank");
  TrainingConfig offload = testing::mixed_adam(3, Precision::Bf16);
  offload.zero.offload_param.device = OffloadDevice::Cpu;
  EXPECT_EQ(refusal(tiny(WeightFormat::Nf4DoubleQuant), offload), "--quantize-base");
  EXPECT_EQ(refusal(tiny(), offload), "");  // a 16-bit frozen base may be offloaded
  TrainingConfig tp = testing::mixed_adam(1, Precision::Bf16);
  tp.tensor_parallel.size = 2;
  EXPECT_EQ(refusal(tiny(), tp, 2), "--lora-rank");
  TransformerShape no_rank = tiny_shape();
  no_rank.lora.base_format = WeightFormat::Nf4DoubleQuant;
  EXPECT_THROW(check_lora(no_rank), InputError);
}

// Pipeline stages keep the flags: a stage's frozen embedding (and its tied copy) is not
// all-reduced.
TEST(LoraSchedule, PipelineStagesKeepTheFrozenBase) {
  TransformerShape s = tiny_shape();
  s.layers = 4;
  s.tied_embeddings = true;
  s.lora.rank = 4;
  TrainingConfig config = testing::mixed_adam(1, Precision::Bf16);
  config.pipeline.size = 2;
  config.batch.gradient_accumulation_steps = 2;
  const Plan plan = testing::plan_of(build_transformer("tiny", s), config, 2, 8);
  ASSERT_EQ(plan.pipeline_stages.size(), 2u);
  for (const auto& stage : plan.pipeline_stages) {
    EXPECT_EQ(stage.model.trainable_parameter_count(), 2 * 2 * 4 * (64 + 64));
    for (const Op& op : stage.schedule.ops)
      EXPECT_FALSE(op.kind == OpKind::AllReduce && op.group == ProcessGroup::Pipeline);
  }
}

// The planning views keep the fine-tuning: --compare drops the variants a 4-bit base cannot run
// (parameters offloaded), --max-model plans every candidate with the base's adapters.
TEST(LoraViews, CompareAndMaxModelKeepTheAdapters) {
  PlanRequest base;
  base.model = with_adapters(model_from_preset("llama2-7b"), 8, {}, WeightFormat::Nf4DoubleQuant);
  base.config = testing::mixed_adam(0, Precision::Bf16);
  base.config.seq_len = 512;
  base.dp_size = 8;
  base.cluster = testing::test_cluster(8, Bytes{24} << 30);
  const auto comparison = compare_variants(base);
  const auto& plans = comparison.plans;
  EXPECT_TRUE(comparison.left_out.empty());
  ASSERT_EQ(plans.size(), standard_variants().size() - 2);
  for (const auto& [variant, plan] : plans) {
    EXPECT_EQ(variant.offload_param, OffloadDevice::None) << variant.label;
    EXPECT_EQ(plan.request.model.trainable_parameter_count(), 4'194'304) << variant.label;
  }
  // On 24 GiB GPUs a 4-bit LLaMA-2 13B fits, whose 16-bit base alone (26 GB) would not.
  const auto found = find_max_models(base, "llama2").variants;
  EXPECT_EQ(found.front().model_name, "llama2-13b");
  base.model = with_adapters(model_from_preset("llama2-7b"), 8);
  EXPECT_EQ(find_max_models(base, "llama2").variants.front().model_name, "llama2-7b");
}

}  // namespace
}  // namespace zerolens
