// Issue 19: every DeepSpeed key is either read into the prediction or named as "parsed, not
// modelled"; keys DeepSpeed applies only at some stages say so; cluster files of another format or
// version are refused; a wrong head count is reported under its own key.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/config/deepspeed.hpp"
#include "sim/hardware/cluster_json.hpp"
#include "sim/hardware/hardware.hpp"
#include "sim/model/model_io.hpp"
#include "sim/model/presets.hpp"
#include "sim/plan/plan.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

std::vector<std::string> warnings_of(const std::string& config) {
  Diagnostics diagnostics;
  parse_deepspeed_config(json::parse(config), diagnostics);
  return diagnostics.warnings;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ConfigNotes, UnmodelledKeysAreNamedInOneNote) {
  const auto warnings = warnings_of(R"({"steps_per_print": 10, "scheduler": {"type": "WarmupLR"},
      "zero_optimization": {"stage": 2, "round_robin_gradients": true, "allgather_partitions": true,
                            "offload_param": {"device": "none", "max_in_cpu": 5}}})");
  ASSERT_EQ(warnings.size(), 1u);
  const std::string& note = warnings[0];
  EXPECT_EQ(note.rfind("note: parsed, not modelled", 0), 0u) << note;
  for (const char* key : {"steps_per_print", "scheduler", "zero_optimization.round_robin_gradients",
                          "zero_optimization.offload_param.max_in_cpu"}) {
    EXPECT_TRUE(contains(note, key)) << key << " missing from: " << note;
  }
  // Set to DeepSpeed's default, it changes nothing: not named.
  EXPECT_FALSE(contains(note, "allgather_partitions")) << note;
}

TEST(ConfigNotes, ModelledKeysAndDefaultsGetNoNote) {
  EXPECT_TRUE(warnings_of(R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8, "allgather_partitions": true,
                            "offload_optimizer": {"device": "cpu", "pin_memory": false}}})")
                  .empty());
}

Plan plan_for(const std::string& config, std::int64_t seq_len) {
  Diagnostics diagnostics;
  PlanRequest request;
  request.model = model_from_preset("gpt2-124m");
  request.config = parse_deepspeed_config(json::parse(config), diagnostics);
  request.config.seq_len = seq_len;
  request.config.batch.micro_batch_per_gpu = 1;
  request.dp_size = 2;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 2, 8);
  return make_plan(request);
}

bool has_note(const Plan& plan, const std::string& part) {
  return std::any_of(plan.notes.begin(), plan.notes.end(),
                     [&](const std::string& n) { return contains(n, part); });
}

TEST(ConfigNotes, OffloadRatioIsReadOnlyAtStageThree) {
  const std::string stage2 =
      R"({"zero_optimization":{"stage":2,"offload_optimizer":{"device":"cpu","ratio":0.3}}})";
  const std::string stage3 =
      R"({"zero_optimization":{"stage":3,"offload_optimizer":{"device":"cpu","ratio":0.3}}})";
  const std::string whole =
      R"({"zero_optimization":{"stage":2,"offload_optimizer":{"device":"cpu","ratio":1.0}}})";
  EXPECT_TRUE(
      has_note(plan_for(stage2, 128), "ratio 0.3 is ignored: DeepSpeed applies it only at ZeRO-3"));
  EXPECT_TRUE(has_note(plan_for(stage3, 128), "partial optimizer offload is parsed, not modelled"));
  EXPECT_FALSE(has_note(plan_for(whole, 128), "ratio"));
}

TEST(ConfigNotes, SequenceBeyondLearnedPositionsIsNoted) {
  EXPECT_TRUE(has_note(plan_for("{}", 4096), "beyond the model's 1024 learned positions"));
  EXPECT_FALSE(has_note(plan_for("{}", 1024), "learned positions"));
}

std::string cluster_error(const json& document) {
  Diagnostics diagnostics;
  try {
    cluster_from_json(document, diagnostics);
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(ConfigNotes, ClusterOfAnotherFormatOrVersionIsRefused) {
  json cluster = cluster_to_json(cluster_from_preset("dgx-h100"));
  EXPECT_EQ(cluster_error(cluster), "(no error)");
  cluster["version"] = 2;
  EXPECT_TRUE(contains(cluster_error(cluster), "version: unsupported cluster format version 2"))
      << cluster_error(cluster);
  cluster["version"] = 1;
  cluster["format"] = "zerolens.model";
  EXPECT_TRUE(contains(cluster_error(cluster), "format: 'zerolens.model' is not a cluster"))
      << cluster_error(cluster);
}

TEST(ConfigNotes, AWrongHeadCountIsReportedUnderItsOwnKey) {
  Diagnostics diagnostics;
  json config = json::parse(R"({"model_type":"llama","num_hidden_layers":2,"hidden_size":4096,
      "num_attention_heads":31,"num_key_value_heads":32,"intermediate_size":11008,"vocab_size":32000,
      "max_position_embeddings":4096})");
  try {
    model_from_hf_config(config, diagnostics, "config.json");
    FAIL() << "31 heads do not divide 4096";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "config.json.num_attention_heads") << error.what();
    EXPECT_TRUE(contains(error.what(), "4096")) << error.what();
  }
  config["num_attention_heads"] = 32;
  config["num_key_value_heads"] = 5;
  try {
    model_from_hf_config(config, diagnostics, "config.json");
    FAIL() << "5 key/value heads do not divide 32";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "config.json.num_key_value_heads") << error.what();
  }
}

}  // namespace
}  // namespace zerolens
