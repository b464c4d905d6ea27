// The one way from flags and GUI edits to a config (sim/config/overrides.hpp): typed fields set
// with the checks and key names of the keys they replace, batch sizes that give way to each other,
// --set read last, the CLI's strict and the GUI's interactive offload rules, and a file read with
// the overrides on top.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/config/deepspeed_json.hpp"
#include "sim/config/overrides.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

TrainingConfig applied(const ConfigOverrides& overrides, TrainingConfig config = {},
                       OverridePolicy policy = OverridePolicy::Strict) {
  Diagnostics diagnostics;
  apply_overrides(config, overrides, diagnostics, std::nullopt, policy);
  return config;
}

// The key an InputError names, "(no error)" when none is thrown.
std::string error_key(const ConfigOverrides& overrides) {
  try {
    applied(overrides).validate();
  } catch (const InputError& error) {
    return error.where();
  }
  return "(no error)";
}

std::string parse_error(const json& document, const ConfigOverrides& overrides) {
  Diagnostics diagnostics;
  try {
    parse_training_config(document, diagnostics, std::nullopt, overrides);
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(ConfigOverrides, SetTheTypedFields) {
  const TrainingConfig c = applied({.stage = 3,
                                    .offload_optimizer = OffloadDevice::Nvme,
                                    .offload_param = OffloadDevice::Cpu,
                                    .nvme_path = "/nvme",
                                    .pin_memory = true,
                                    .reduce_bucket_size = 5e8,
                                    .prefetch_bucket_size = 1e7,
                                    .sub_group_size = 1e8,
                                    .overlap_comm = false,
                                    .micro_batch = 4,
                                    .seq_len = 2048,
                                    .precision = Precision::Bf16,
                                    .optimizer = "FusedAdam",
                                    .activation_checkpointing = true});
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::Nvme);
  EXPECT_EQ(c.zero.offload_param.nvme_path, "/nvme");
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 10'000'000);
  EXPECT_EQ(c.zero.sub_group_size, 100'000'000);
  EXPECT_FALSE(c.zero.overlap());
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 4);
  EXPECT_EQ(c.seq_len, 2048);
  EXPECT_EQ(c.precision.precision, Precision::Bf16);
  EXPECT_EQ(c.optimizer.type, OptimizerType::Adam);
  EXPECT_TRUE(c.activation_checkpointing.enabled);
  EXPECT_NO_THROW(c.validate());
  EXPECT_FALSE(applied({.seq_len = 0}, c).seq_len);  // 0: the model's default
}

TEST(ConfigOverrides, BadValuesNameTheKeyTheyReplace) {
  EXPECT_EQ(error_key({.reduce_bucket_size = -5}), "zero_optimization.reduce_bucket_size");
  EXPECT_EQ(error_key({.reduce_bucket_size = 1.5}), "zero_optimization.reduce_bucket_size");
  EXPECT_EQ(error_key({.sub_group_size = -1}), "zero_optimization.sub_group_size");
  EXPECT_EQ(error_key({.max_live_parameters = -1}), "zero_optimization.stage3_max_live_parameters");
  EXPECT_EQ(error_key({.prefetch_bucket_size = 1e20}),
            "zero_optimization.stage3_prefetch_bucket_size");
  EXPECT_EQ(error_key({.micro_batch = std::int64_t(1) << 41}), "train_micro_batch_size_per_gpu");
  EXPECT_EQ(error_key({.optimizer = "LAMB"}), "optimizer.type");
  EXPECT_EQ(error_key({.momentum = -0.5}), "optimizer.params.momentum");
  EXPECT_EQ(error_key({.optimizer = "sgd", .momentum = 1}), "optimizer.params.momentum");
  EXPECT_EQ(error_key({.stage = 5}), "zero_optimization.stage");
  EXPECT_EQ(error_key({.seq_len = -3}), "--seq-len");
  EXPECT_EQ(error_key({.set = {"no-equals"}}), "--set");
  EXPECT_EQ(error_key({.set = {"zero_optimization.reduce_bucket_size=lots"}}),
            "zero_optimization.reduce_bucket_size");
}

// The CLI's rule: an offload the stage does not allow is an error naming the key, whether both
// were given or the stage came later (the message the CLI has always printed).
TEST(ConfigOverrides, StrictLeavesAForbiddenOffloadToValidation) {
  try {
    applied({.stage = 2, .offload_param = OffloadDevice::Cpu}).validate();
    FAIL() << "no error";
  } catch (const InputError& error) {
    EXPECT_STREQ(error.what(),
                 "zero_optimization.offload_param.device: parameter offload requires ZeRO stage 3 "
                 "(stage is 2)");
  }
  const TrainingConfig stage3 = applied({.stage = 3, .offload_param = OffloadDevice::Cpu});
  EXPECT_EQ(error_key({.stage = 0, .offload_optimizer = OffloadDevice::Cpu}),
            "zero_optimization.offload_optimizer.device");
  EXPECT_EQ(applied({.stage = 2}, stage3).zero.offload_param.device, OffloadDevice::Cpu);
  EXPECT_EQ(error_key({.stage = 3, .offload_optimizer = OffloadDevice::Nvme}),
            "zero_optimization.offload_optimizer.nvme_path");
}

// The GUI's controls: a stage change takes away what the stage does not allow, unless chosen with
// it; NVMe offload gets a path; checkpointing off keeps its sub-options.
TEST(ConfigOverrides, InteractiveSettlesWhatAStageChangeBreaks) {
  const auto interactive = [](const ConfigOverrides& o, const TrainingConfig& config) {
    return applied(o, config, OverridePolicy::Interactive);
  };
  const TrainingConfig offloaded = applied(
      {.stage = 3, .offload_optimizer = OffloadDevice::Cpu, .offload_param = OffloadDevice::Cpu});
  const TrainingConfig stage2 = interactive({.stage = 2}, offloaded);
  EXPECT_EQ(stage2.zero.offload_param.device, OffloadDevice::None);
  EXPECT_EQ(stage2.zero.offload_optimizer.device, OffloadDevice::Cpu);
  EXPECT_EQ(interactive({.stage = 0}, offloaded).zero.offload_optimizer.device,
            OffloadDevice::None);
  const TrainingConfig chosen =
      interactive({.stage = 2, .offload_param = OffloadDevice::Cpu}, offloaded);
  EXPECT_EQ(chosen.zero.offload_param.device, OffloadDevice::Cpu);
  EXPECT_THROW(chosen.validate(), InputError);
  const TrainingConfig nvme = interactive({.offload_optimizer = OffloadDevice::Nvme}, offloaded);
  EXPECT_EQ(nvme.zero.offload_optimizer.nvme_path, "/local_nvme");
  EXPECT_EQ(nvme.zero.offload_param.nvme_path, "");

  const TrainingConfig partitioned = applied({.partition_activations = true});
  EXPECT_TRUE(partitioned.activation_checkpointing.enabled);  // a sub-option switches it on
  const TrainingConfig off = interactive({.activation_checkpointing = false}, partitioned);
  EXPECT_FALSE(off.activation_checkpointing.enabled);
  EXPECT_TRUE(off.activation_checkpointing.partition_activations);
  EXPECT_FALSE(applied({.activation_checkpointing = false}, partitioned)
                   .activation_checkpointing.partition_activations);
}

TEST(ConfigOverrides, BatchSizesGiveWayToEachOther) {
  TrainingConfig file;
  file.batch = {.train_batch_size = 64, .micro_batch_per_gpu = 2, .gradient_accumulation_steps = 4};
  const BatchConfig micro = applied({.micro_batch = 8}, file).batch;
  EXPECT_FALSE(micro.train_batch_size);  // follows
  EXPECT_EQ(micro.gradient_accumulation_steps, 4);
  const BatchConfig train = applied({.train_batch = 128}, file).batch;
  EXPECT_FALSE(train.micro_batch_per_gpu);  // follows
  EXPECT_EQ(train.gradient_accumulation_steps, 4);
  const BatchConfig all =
      applied({.micro_batch = 1, .grad_accum = 2, .train_batch = 16}, file).batch;
  EXPECT_EQ(all.train_batch_size, 16);
  EXPECT_EQ(applied({.micro_batch_if_unset = 1}).batch.micro_batch_per_gpu, 1);
  EXPECT_EQ(
      applied({.train_batch = 128, .micro_batch_if_unset = 1}, file).batch.micro_batch_per_gpu,
      std::nullopt);
}

// --set is read last, as the key of a file, over the typed fields.
TEST(ConfigOverrides, SetKeysWinOverTypedFields) {
  const TrainingConfig c =
      applied({.stage = 2,
               .reduce_bucket_size = 1e6,
               .set = {"zero_optimization.stage=3", "zero_optimization.round_robin_gradients=true",
                       "zero_optimization.max_live_parameters=5"}});
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.reduce_bucket_size, 1'000'000);  // kept: not in the --set keys
  EXPECT_TRUE(c.zero.round_robin_gradients);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 5);  // DeepSpeed's alias
  Diagnostics diagnostics;
  TrainingConfig warned;
  apply_overrides(warned, {.set = {"zero_optimization.reduce_bucket_sise=5"}}, diagnostics);
  ASSERT_EQ(diagnostics.warnings.size(), 1u);
  EXPECT_NE(diagnostics.warnings[0].find("did you mean 'reduce_bucket_size'"), std::string::npos);
}

// What a file says that the overrides do not replace stays: adam_w_mode makes "Adam" AdamW, fp32
// gradient accumulation follows the precision.
TEST(ConfigOverrides, KeepWhatTheFileWroteBesideThem) {
  Diagnostics diagnostics;
  const json file = {{"optimizer", {{"type", "Adam"}, {"params", {{"adam_w_mode", true}}}}},
                     {"data_types", {{"grad_accum_dtype", "fp32"}}}};
  const TrainingConfig c = parse_training_config(
      file, diagnostics, std::nullopt, {.precision = Precision::Bf16, .optimizer = "adam"});
  EXPECT_EQ(c.optimizer.type, OptimizerType::AdamW);
  EXPECT_EQ(c.precision.grad_bytes(), 4);
  EXPECT_EQ(applied({.precision = Precision::Fp16}, c).precision.grad_bytes(), 4);
  EXPECT_EQ(to_deepspeed_json(applied({.precision = Precision::Fp32}, c)).count("data_types"), 0u);
}

// A value the user replaces is neither read nor warned about: the file may hold what the flag
// fixes.
TEST(ConfigOverrides, AFileIsReadWithoutTheKeysTheyReplace) {
  const json lamb = {{"optimizer", {{"type", "LAMB"}}}};
  EXPECT_NE(parse_error(lamb, {}).find("optimizer.type"), std::string::npos);
  EXPECT_EQ(parse_error(lamb, {.optimizer = "adamw"}), "(no error)");
  const json both = {{"fp16", {{"enabled", true}}}, {"bf16", {{"enabled", true}}}};
  EXPECT_NE(parse_error(both, {}).find("cannot both be enabled"), std::string::npos);
  EXPECT_EQ(parse_error(both, {.precision = Precision::Fp16}), "(no error)");
  const json nvme = {
      {"zero_optimization", {{"stage", 2}, {"offload_param", {{"device", "nvme"}}}}}};
  EXPECT_EQ(parse_error(nvme, {.stage = 3, .nvme_path = "/x"}), "(no error)");
  EXPECT_EQ(without_overridden_keys(nvme, {.stage = 3}),
            json({{"zero_optimization", {{"offload_param", {{"device", "nvme"}}}}}}));

  Diagnostics diagnostics;
  const json hf_auto = {{"fp16", {{"enabled", "auto"}}},
                        {"train_micro_batch_size_per_gpu", "auto"}};
  const TrainingConfig c =
      parse_training_config(hf_auto, diagnostics, std::nullopt,
                            {.micro_batch_if_unset = 1, .precision = Precision::Bf16});
  EXPECT_TRUE(diagnostics.warnings.empty());
  EXPECT_FALSE(c.batch.micro_batch_per_gpu);  // "auto" names a batch size: no default
}

TEST(ConfigOverrides, ColossalAiFilesTakeThemToo) {
  Diagnostics diagnostics;
  const json colossal = {{"zero", {{"level", 3}, {"offload_param_config", {{"device", "cpu"}}}}}};
  const TrainingConfig c = parse_training_config(
      colossal, diagnostics, std::nullopt, {.stage = 2, .offload_param = OffloadDevice::None});
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.precision.precision, Precision::Fp16);
  EXPECT_EQ(c.batch.micro_batch_per_gpu, 1);
  EXPECT_EQ(c.zero.label(), "ZeRO-2");
  EXPECT_EQ(parse_training_config(colossal, diagnostics).zero.label(), "ZeRO-3 + param:cpu");
}

}  // namespace
}  // namespace zerolens
