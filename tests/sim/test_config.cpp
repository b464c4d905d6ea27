// DeepSpeed and ColossalAI config parsing: DeepSpeed's defaults (runtime/zero/config.py), the
// batch rule train = micro x accumulation x dp, "auto" as the HF integration resolves it, and
// every invalid input named by key.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/config/colossalai.hpp"
#include "sim/config/config.hpp"
#include "sim/config/deepspeed.hpp"
#include "sim/config/deepspeed_json.hpp"
#include "sim/config/overrides.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

json read(const std::string& name) {
  std::ifstream file(std::string(ZEROLENS_TEST_DATA) + "/" + name);
  return json::parse(file);
}

TrainingConfig parse(const json& document, std::optional<std::int64_t> hidden = std::nullopt) {
  Diagnostics diagnostics;
  return parse_deepspeed_config(document, diagnostics, hidden);
}

std::string error_key(const json& document, std::optional<std::int64_t> hidden = std::nullopt) {
  try {
    parse(document, hidden);
  } catch (const InputError& error) {
    return error.where();
  }
  return "(no error)";
}

TEST(DeepSpeedConfig, EmptyConfigHasDeepSpeedDefaults) {
  const TrainingConfig c = parse(json::object());
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 100'000);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_EQ(c.zero.stage3_max_reuse_distance, 1'000'000'000);
  EXPECT_EQ(c.zero.sub_group_size, 1'000'000'000);
  EXPECT_TRUE(c.zero.contiguous_gradients);
  EXPECT_TRUE(c.zero.reduce_scatter);
  EXPECT_FALSE(c.zero.overlap());  // overlap_comm defaults to false below stage 3
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::None);
  EXPECT_EQ(c.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(c.zero.offload_param.buffer_size, 100'000'000);
  EXPECT_EQ(c.zero.offload_param.max_in_cpu, 1'000'000'000);
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(c.precision.precision, Precision::Fp32);
  EXPECT_EQ(c.optimizer.type, OptimizerType::Adam);
  EXPECT_FALSE(c.activation_checkpointing.enabled);
  EXPECT_TRUE(parse(json{{"zero_optimization", {{"stage", 3}}}}).zero.overlap());  // true at stage 3
}

// --reduce-buffers-at is zerolens's, not DeepSpeed's: a config zerolens writes keeps the older
// timing as zero_optimization.reduce_buffers_at, so a trace or an export plans again the same; the
// default (DeepSpeed 0.19.8's first hook) is not written; any other value is refused by its key.
TEST(DeepSpeedConfig, ReduceBuffersAtRoundTripsAndIsCheckedByKey) {
  TrainingConfig older = parse(json::object());
  EXPECT_TRUE(older.zero.reduce_buffers_at_first_hook);
  EXPECT_FALSE(to_deepspeed_json(older)["zero_optimization"].contains("reduce_buffers_at"));
  older.zero.reduce_buffers_at_first_hook = false;
  const json written = to_deepspeed_json(older);
  EXPECT_EQ(written["zero_optimization"]["reduce_buffers_at"], "backward");
  EXPECT_FALSE(parse(written).zero.reduce_buffers_at_first_hook);
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"reduce_buffers_at":"later"}})")),
            "zero_optimization.reduce_buffers_at");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"reduce_buffers_at":1}})")),
            "zero_optimization.reduce_buffers_at");
}

TEST(DeepSpeedConfig, ReadsAZeroOffloadConfig) {
  const TrainingConfig c = parse(read("deepspeed/zero2_offload.json"));
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.reduce_bucket_size, 200'000'000);  // written 2e8
  EXPECT_TRUE(c.zero.overlap());
  EXPECT_EQ(c.precision.precision, Precision::Fp16);
  EXPECT_EQ(c.optimizer.type, OptimizerType::AdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  const ResolvedBatch batch = resolve_batch(c.batch, 8);
  EXPECT_EQ(batch.micro_batch_per_gpu, 4);  // 64 / (2 x 8)
}

TEST(DeepSpeedConfig, ResolvesAutoLikeTheHuggingFaceIntegration) {
  Diagnostics diagnostics;
  const TrainingConfig c = parse_deepspeed_config(read("deepspeed/zero3_hf_auto.json"), diagnostics, 4096);
  EXPECT_EQ(c.zero.reduce_bucket_size, 4096 * 4096);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, std::int64_t(0.9 * 4096 * 4096));
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 10 * 4096);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::Cpu);
  EXPECT_FALSE(c.batch.micro_batch_per_gpu.has_value());
  // fp16.enabled and bf16.enabled "auto", and the note naming the keys set but not modelled.
  ASSERT_EQ(diagnostics.warnings.size(), 3u);
  EXPECT_EQ(diagnostics.warnings[0].rfind("note: parsed, not modelled", 0), 0u)
      << diagnostics.warnings[0];
  EXPECT_EQ(error_key(read("deepspeed/zero3_hf_auto.json")), "zero_optimization.reduce_bucket_size");
}

TEST(DeepSpeedConfig, ReadsZeroInfinity) {
  const TrainingConfig c = parse(read("deepspeed/zero_infinity_nvme.json"));
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::Nvme);
  EXPECT_EQ(c.zero.offload_optimizer.nvme_path, "/local_nvme");
  EXPECT_EQ(c.zero.sub_group_size, 100'000'000);
  EXPECT_EQ(c.precision.precision, Precision::Bf16);
  EXPECT_TRUE(c.activation_checkpointing.enabled);
  EXPECT_TRUE(c.activation_checkpointing.cpu_checkpointing);
  EXPECT_EQ(c.activation_checkpointing.number_checkpoints, 4);
}

TEST(DeepSpeedConfig, AcceptsDeepSpeedAliasesAndDeprecatedKeys) {
  const TrainingConfig c = parse(json::parse(
      R"({"zero_optimization":{"stage":3,"prefetch_bucket_size":1234,"max_live_parameters":99,"cpu_offload":true},
          "bfloat16":{"enabled":true}})"));
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 1234);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 99);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_EQ(c.precision.precision, Precision::Bf16);
}

TEST(DeepSpeedConfig, UnknownKeysAreWarnedWithTheClosestName) {
  Diagnostics diagnostics;
  parse_deepspeed_config(json::parse(R"({"zero_optimization":{"stage3_prefetch_bucket_sise":5},"fp61":{}})"),
                         diagnostics);
  ASSERT_EQ(diagnostics.warnings.size(), 2u);
  EXPECT_NE(diagnostics.warnings[0].find("did you mean 'fp16'"), std::string::npos) << diagnostics.warnings[0];
  EXPECT_NE(diagnostics.warnings[1].find("zero_optimization.stage3_prefetch_bucket_sise"), std::string::npos);
  EXPECT_NE(diagnostics.warnings[1].find("did you mean 'stage3_prefetch_bucket_size'"), std::string::npos);
}

TEST(DeepSpeedConfig, InvalidInputNamesTheKey) {
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"stage":2,"offload_param":{"device":"cpu"}}})")),
            "zero_optimization.offload_param.device");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"stage":3,"offload_optimizer":{"device":"nvme"}}})")),
            "zero_optimization.offload_optimizer.nvme_path");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"reduce_bucket_size":-5}})")),
            "zero_optimization.reduce_bucket_size");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"reduce_bucket_size":"big"}})")),
            "zero_optimization.reduce_bucket_size");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"sub_group_size":1.5}})")), "zero_optimization.sub_group_size");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"stage":4}})")), "zero_optimization.stage");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"offload_optimizer":{"device":"gpu"}}})")),
            "zero_optimization.offload_optimizer.device");
  EXPECT_EQ(error_key(json::parse(R"({"fp16":{"enabled":true},"bf16":{"enabled":true}})")), "bf16.enabled");
  EXPECT_EQ(error_key(json::parse(R"({"train_batch_size":-8})")), "train_batch_size");
  EXPECT_EQ(error_key(json::parse(R"({"optimizer":{"type":"Lamb"}})")), "optimizer.type");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":[]})")), "zero_optimization");
  EXPECT_EQ(error_key(json::parse(R"({"zero_optimization":{"stage":0,"offload_optimizer":{"device":"cpu"}}})")),
            "zero_optimization.offload_optimizer.device");
}

// DeepSpeed builds FusedAdam unless optimizer.params.torch_adam asks for torch.optim (engine
// _configure_basic_optimizer), whose default on CUDA is the foreach kernel; FSDP runs torch.optim.
TEST(DeepSpeedConfig, TorchAdamSelectsTorchOptimsForeachKernel) {
  EXPECT_EQ(parse(json::object()).effective_optimizer_kernel(), OptimizerKernel::Fused);
  const auto kernel_of = [](bool torch_adam) {
    return parse({{"optimizer", {{"type", "AdamW"}, {"params", {{"torch_adam", torch_adam}}}}}})
        .effective_optimizer_kernel();
  };
  EXPECT_EQ(kernel_of(true), OptimizerKernel::Foreach);
  EXPECT_EQ(kernel_of(false), OptimizerKernel::Fused);
  TrainingConfig fsdp;
  fsdp.framework = Framework::Fsdp2;
  EXPECT_EQ(fsdp.effective_optimizer_kernel(), OptimizerKernel::Foreach);
  EXPECT_EQ(
      error_key(json::parse(R"({"optimizer":{"type":"AdamW","params":{"torch_adam":"yes"}}})")),
      "optimizer.params.torch_adam");
  EXPECT_EQ(parse_optimizer_kernel("for-loop", "--optimizer-kernel"), OptimizerKernel::ForLoop);
  // A config zerolens writes (the GUI's export, a trace's inputs) keeps the choice.
  for (const bool torch_adam : {true, false}) {
    const json written = to_deepspeed_json(parse(
        {{"optimizer", {{"type", "AdamW"}, {"params", {{"torch_adam", torch_adam}}}}}}));
    EXPECT_EQ(written["optimizer"]["params"]["torch_adam"], torch_adam);
    EXPECT_EQ(parse(written).effective_optimizer_kernel(), kernel_of(torch_adam));
  }
  EXPECT_FALSE(to_deepspeed_json(parse(json::object()))["optimizer"]["params"].contains("torch_adam"));
  EXPECT_THROW(parse_optimizer_kernel("fast", "--optimizer-kernel"), InputError);
}

TEST(BatchRule, FollowsDeepSpeed) {
  auto resolve = [](std::optional<std::int64_t> train, std::optional<std::int64_t> micro,
                    std::optional<std::int64_t> accum, int dp) {
    return resolve_batch(BatchConfig{train, micro, accum}, dp);
  };
  EXPECT_EQ(resolve(64, 4, std::nullopt, 8).gradient_accumulation_steps, 2);
  EXPECT_EQ(resolve(64, std::nullopt, 2, 8).micro_batch_per_gpu, 4);
  EXPECT_EQ(resolve(std::nullopt, 4, 3, 8).train_batch_size, 96);
  EXPECT_EQ(resolve(32, std::nullopt, std::nullopt, 8).micro_batch_per_gpu, 4);
  EXPECT_EQ(resolve(std::nullopt, 2, std::nullopt, 8).train_batch_size, 16);
  EXPECT_THROW(resolve(64, 4, 3, 8), InputError);   // 4 x 3 x 8 = 96 != 64
  EXPECT_THROW(resolve(60, 4, std::nullopt, 8), InputError);  // does not divide
  EXPECT_THROW(resolve(4, std::nullopt, std::nullopt, 8), InputError);  // micro would be 0
  EXPECT_THROW(resolve(std::nullopt, std::nullopt, 2, 8), InputError);
}

TEST(DeepSpeedConfig, WrittenConfigParsesToTheSameConfig) {
  for (const char* file : {"deepspeed/zero2_offload.json", "deepspeed/zero_infinity_nvme.json"}) {
    const json written = to_deepspeed_json(parse(read(file)));
    Diagnostics diagnostics;
    const json rewritten = to_deepspeed_json(parse_deepspeed_config(written, diagnostics));
    EXPECT_EQ(written, rewritten) << file;
    // Nothing but the note naming what the file sets and zerolens does not model (issue 19).
    for (const std::string& warning : diagnostics.warnings)
      EXPECT_EQ(warning.rfind("note: parsed, not modelled", 0), 0u) << file << ": " << warning;
  }
}

TEST(Overrides, SetNestedKeysWithJsonValues) {
  json document = json::object();
  apply_override(document, "zero_optimization.stage=3");
  apply_override(document, "zero_optimization.offload_optimizer.device=nvme");
  apply_override(document, "zero_optimization.offload_optimizer.nvme_path=/mnt/nvme");
  apply_override(document, "zero_optimization.reduce_bucket_size=5e7");
  const TrainingConfig c = parse(document);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::Nvme);
  EXPECT_EQ(c.zero.reduce_bucket_size, 50'000'000);
  EXPECT_THROW(apply_override(document, "no-equals"), InputError);
  EXPECT_THROW(apply_override(document, "a..b=1"), InputError);
  EXPECT_THROW(apply_override(document, "=1"), InputError);
}

TEST(ColossalAi, SeedDocumentConfigsMapToDeepSpeedFields) {
  Diagnostics diagnostics;
  const TrainingConfig plain = parse_training_config(read("colossalai/zero3.json"), diagnostics);
  EXPECT_EQ(plain.zero.stage, 3);
  EXPECT_EQ(plain.precision.precision, Precision::Fp16);  // ZeRO in ColossalAI always runs fp16
  EXPECT_TRUE(plain.precision.loss_scale.dynamic());
  EXPECT_DOUBLE_EQ(plain.gradient_clipping, 1.0);

  const TrainingConfig cpu = parse_training_config(read("colossalai/zero3_cpu_offload.json"), diagnostics);
  EXPECT_EQ(cpu.zero.offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_EQ(cpu.zero.offload_param.device, OffloadDevice::Cpu);
  EXPECT_EQ(cpu.zero.offload_param.max_in_cpu, 1'000'000'000);  // the seed's fast_init=<count>
  EXPECT_TRUE(cpu.zero.offload_optimizer.fast_init);

  const TrainingConfig nvme = parse_training_config(read("colossalai/zero3_nvme.json"), diagnostics);
  EXPECT_EQ(nvme.zero.offload_param.device, OffloadDevice::Nvme);
  EXPECT_EQ(nvme.zero.offload_param.nvme_path, "/nvme_data");
  EXPECT_EQ(nvme.batch.micro_batch_per_gpu, 2);
}

TEST(ColossalAi, InvalidLevelAndBlocksAreNamed) {
  Diagnostics diagnostics;
  try {
    parse_colossalai_config(json::parse(R"({"zero":{"level":5}})"), diagnostics);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "zero.level");
  }
  try {
    parse_colossalai_config(json::parse(R"({"zero":{"level":2,"offload_param_config":{"device":"cpu"}}})"), diagnostics);
    FAIL();
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "zero_optimization.offload_param.device");
  }
}

}  // namespace
}  // namespace zerolens
