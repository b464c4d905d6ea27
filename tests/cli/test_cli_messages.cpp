// Issue 19's smaller findings, through the real binary: flag errors say what was expected in a
// line, a FIFO given to check-measured is named as such, notes reach the user.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"

namespace {

using zerolens::cli_testing::quote;
using zerolens::cli_testing::Result;
using zerolens::cli_testing::run;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string data_path(const std::string& name) {
  return quote(std::string(ZEROLENS_TEST_DATA) + "/" + name);
}

TEST(CliMessages, IntegerFlagsSayWhatTheyExpectInOneLine) {
  for (const char* arguments :
       {"plan --micro-batch 0", "plan --micro-batch x", "sweep --micro-batches 2,0"}) {
    const Result result = run(arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments << "\n" << result.output;
    EXPECT_TRUE(contains(result.output, "must be a positive integer, got '")) << arguments << "\n"
                                                                              << result.output;
    // CLI11's PositiveNumber printed the range of a double: over 300 digits.
    EXPECT_LT(result.output.size(), 200u) << arguments << "\n" << result.output;
  }
  const Result steps = run("run --steps 0");
  EXPECT_EQ(steps.exit_code, 2) << steps.output;
  EXPECT_TRUE(contains(steps.output, "--steps: must be an integer from 1 to 1000000, got '0'"))
      << steps.output;
  EXPECT_FALSE(contains(steps.output, "error: error:")) << steps.output;
}

// --reduce-buffers-at: DeepSpeed 0.19.8 allocates the stage-1/2 reduce buffer at the first gradient
// hook, older DeepSpeed as backward() began. GPT-2 124M at 4 x 1024 peaks in the loss's backward,
// before its first hook (ln_f): the older timing holds the whole 5e8-element bf16 buffer (1e9
// bytes) there too, and nothing else moves.
TEST(CliMessages, ReduceBuffersAtTakesTheDeepSpeedTimingByName) {
  const Result bad = run("plan --reduce-buffers-at later");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "--reduce-buffers-at")) << bad.output;
  EXPECT_TRUE(contains(bad.output, "first-hook")) << bad.output;
  const std::string common =
      "plan --json --model gpt2-124m --gpus 1 --stage 2 --precision bf16 --micro-batch 4 "
      "--seq-len 1024 --attention eager --cluster h100-x1";
  const auto allocated = [&](const std::string& extra) {
    const Result result = run(common + extra);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    const std::string key = "\"allocated\": ";
    const auto at = result.output.find(key);
    EXPECT_NE(at, std::string::npos) << result.output;
    return at == std::string::npos ? 0.0 : std::stod(result.output.substr(at + key.size()));
  };
  EXPECT_DOUBLE_EQ(allocated(" --reduce-buffers-at backward") - allocated(""), 1e9);
}

TEST(CliMessages, CheckMeasuredNamesAFifoAsSuch) {
  const std::string fifo =
      (std::filesystem::temp_directory_path() / ("zerolens-fifo-" + std::to_string(::getpid())))
          .string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Result result = run("check-measured " + quote(fifo));
  std::filesystem::remove(fifo);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(contains(result.output, "is not a regular file")) << result.output;
  EXPECT_FALSE(contains(result.output, "no such file")) << result.output;
}

// The executor runs DeepSpeed's ZeRO with a fused Adam: an FSDP profile is refused, torch_adam's
// temporaries are named as planned but not run; a kernel flag outside its names is refused.
TEST(CliMessages, TheExecutorSaysWhatItDoesNotRun) {
  const Result fsdp = run("run -m gpt2-tiny --framework fsdp2 --steps 1");
  EXPECT_EQ(fsdp.exit_code, 2) << fsdp.output;
  EXPECT_TRUE(contains(fsdp.output, "--framework: the executor runs DeepSpeed's ZeRO, not fsdp2"))
      << fsdp.output;
  const Result torch_adam =
      run("run -m gpt2-tiny -s 2 --steps 1 --set optimizer.params.torch_adam=true");
  EXPECT_EQ(torch_adam.exit_code, 0) << torch_adam.output;
  EXPECT_TRUE(
      contains(torch_adam.output, "note: the executor runs a fused Adam: the foreach kernel"))
      << torch_adam.output;
  // Its measured table in the backend's words and in MB (it printed "gpu" and raw bytes).
  EXPECT_TRUE(contains(torch_adam.output, "MB = 1e6 bytes")) << torch_adam.output;
  EXPECT_TRUE(contains(torch_adam.output, "gpu (host memory, CPU backend)")) << torch_adam.output;
  const Result kernel = run("plan --optimizer-kernel fast");
  EXPECT_EQ(kernel.exit_code, 2) << kernel.output;
  EXPECT_TRUE(contains(kernel.output, "--optimizer-kernel")) << kernel.output;
  // Issue 21: a model it cannot train is refused before the header and the step table.
  const Result llama = run("run -m llama2-7b --steps 1");
  EXPECT_EQ(llama.exit_code, 2) << llama.output;
  EXPECT_TRUE(contains(llama.output, "model.norm: RMSNorm is not supported")) << llama.output;
  EXPECT_FALSE(contains(llama.output, "zerolens run:")) << llama.output;
  EXPECT_FALSE(contains(llama.output, "grad norm")) << llama.output;
}

TEST(CliMessages, PlanNotesTheUnmodelledAndTheImpossible) {
  const Result positions = run("plan --seq-len 4096");
  EXPECT_EQ(positions.exit_code, 0) << positions.output;
  EXPECT_TRUE(
      contains(positions.output, "note: seq_len 4096 is beyond the model's 1024 learned positions"))
      << positions.output;
  const Result keys =
      run("plan --set steps_per_print=5 --set zero_optimization.round_robin_gradients=true");
  EXPECT_EQ(keys.exit_code, 0) << keys.output;
  EXPECT_TRUE(contains(keys.output, "note: parsed, not modelled")) << keys.output;
  EXPECT_TRUE(contains(keys.output, "zero_optimization.round_robin_gradients")) << keys.output;
  EXPECT_FALSE(contains(keys.output, "warning: note:")) << keys.output;
}

TEST(CliMessages, AnOutputOverAnInputIsRefusedAndTheInputKept) {
  namespace fs = std::filesystem;
  const fs::path directory =
      fs::temp_directory_path() / ("zerolens-overwrite-" + std::to_string(::getpid()));
  fs::create_directories(directory);
  const fs::path config = directory / "ds.json", link = directory / "link.json";
  const std::string text =
      R"({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}})";
  {
    std::FILE* file = std::fopen(config.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs(text.c_str(), file);
    std::fclose(file);
  }
  fs::create_hard_link(config, link);
  for (const fs::path& output : {config, link}) {
    const Result result =
        run("plan -c " + quote(config.string()) + " --json -o " + quote(output.string()));
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_TRUE(contains(result.output, "is also an input")) << result.output;
  }
  std::FILE* file = std::fopen(config.c_str(), "r");
  ASSERT_NE(file, nullptr);
  char kept[256] = {};
  const std::size_t read = std::fread(kept, 1, sizeof kept - 1, file);
  std::fclose(file);
  EXPECT_EQ(std::string(kept, read), text);
  fs::remove_all(directory);
}

}  // namespace

// Tensor parallelism is planned (both groups' collectives in the report); a GPU count that does
// not split into TP groups is named, and so is a run started on too few processes for its TP
// groups, or on the cuda backend (whose GPT-2 has no TP layer steps).
TEST(CliMessages, TensorParallelIsPlannedAndItsRanksAreNamed) {
  const Result plan = run("plan -m gpt2-124m -s 1 -p bf16 --gpus 8 --tp 2 --sp true");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_TRUE(
      contains(plan.output, "tensor parallel 2 with sequence parallelism x data parallel 4"))
      << plan.output;
  EXPECT_TRUE(contains(plan.output, "tp 2")) << plan.output;
  EXPECT_TRUE(contains(plan.output, "dp 4")) << plan.output;
  const Result uneven = run("plan -m gpt2-124m --gpus 6 --tp 4");
  EXPECT_EQ(uneven.exit_code, 2) << uneven.output;
  EXPECT_TRUE(contains(uneven.output, "--gpus must be a multiple of --tp x --pp")) << uneven.output;
  const Result heads = run("plan -m gpt2-1.5b --tp 2");
  EXPECT_EQ(heads.exit_code, 2) << heads.output;
  EXPECT_TRUE(contains(heads.output, "model.heads: the attention heads (25)")) << heads.output;
  const Result executor = run("run -m gpt2-tiny --tp 2 --steps 1");
  EXPECT_EQ(executor.exit_code, 2) << executor.output;
  EXPECT_TRUE(contains(executor.output, "--tp: 1 processes are running; start a multiple of --tp"))
      << executor.output;
  const Result cuda = run("run -m gpt2-tiny --gpus 2 --tp 2 --device cuda --steps 1");
  EXPECT_EQ(cuda.exit_code, 2) << cuda.output;
  EXPECT_TRUE(contains(cuda.output, "--device cuda") ||
              contains(cuda.output, "--tp: tensor parallelism runs on --device cpu"))
      << cuda.output;
}

// Expert parallelism of a MoE model (issue 21) through the binary: the EP group's exchanges and the
// expert-data-parallel group's reductions listed by group, the capacity named, the refusals named.
// Mixtral on 64 H100s, EP 8, 4096 tokens a micro-step: capacity 4096 / 8 x 2 = 1024, a bf16
// [8, 1024, 4096] buffer of 67,108,864 bytes, 6 exchanges a block with checkpointing (forward,
// recompute, backward), 192 in 32 blocks: 12,884,901,888 bytes.
TEST(CliMessages, ExpertParallelIsPlannedByGroupAndRefusalsNamed) {
  const std::string mixtral = "-m " + data_path("hf/Mixtral-8x7B-v0.1.json") +
                              " -p bf16 --gpus 64 --cluster dgx-h100 -b 1 --seq-len 4096 "
                              "--activation-checkpointing true";
  const Result plan = run("plan " + mixtral + " -s 2 --ep 8");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  for (const char* text :
       {"all_to_all             ep 8    192", "reduce_scatter  expert-dp 8",
        "data parallel 64 with expert parallel 8", "12.88B parameters active per token",
        "1024 tokens per expert per micro-step"})
    EXPECT_TRUE(contains(plan.output, text)) << text << "\n" << plan.output;
  const Result json = run("plan " + mixtral + " -s 2 --ep 8 --json", false);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const auto document = nlohmann::json::parse(json.out);
  EXPECT_EQ(document.at("moe").at("capacity"), 1024);
  EXPECT_EQ(document.at("comm").at("expert_parallel_collectives").at("all_to_all").at("bytes"),
            std::int64_t(192) * 67'108'864);
  const Result stage3 = run("plan " + mixtral + " -s 3 --ep 8");
  EXPECT_EQ(stage3.exit_code, 2) << stage3.output;
  EXPECT_TRUE(contains(stage3.output, "moe.ep_size: DeepSpeed's MoE layers run with ZeRO stage"))
      << stage3.output;
  const Result dense = run("plan -m gpt2-124m --gpus 8 --ep 2");
  EXPECT_EQ(dense.exit_code, 2) << dense.output;
  EXPECT_TRUE(contains(dense.output, "--ep: expert parallelism splits")) << dense.output;
  const Result uneven = run("plan " + mixtral + " -s 2 --ep 3");
  EXPECT_EQ(uneven.exit_code, 2) << uneven.output;
  EXPECT_TRUE(contains(uneven.output, "num_experts % ep_size == 0")) << uneven.output;
  const Result executor = run("run -m gpt2-tiny --gpus 2 --ep 2 --steps 1");
  EXPECT_EQ(executor.exit_code, 2) << executor.output;
  EXPECT_TRUE(contains(executor.output, "--ep")) << executor.output;
}

// run and validate list only the flags the executor runs; the others still reach their refusal.
TEST(CliMessages, RunHelpListsWhatTheExecutorRuns) {
  for (const char* command : {"run --help", "validate --help"}) {
    const Result help = run(command);
    EXPECT_EQ(help.exit_code, 0) << help.output;
    for (const char* listed : {"--stage", "--offload-optimizer", "--steps", "--measured-trace",
                               "\n  --quantized-weights", "\n  --quantized-gradients"})
      EXPECT_TRUE(contains(help.output, listed)) << command << ": " << listed;
    // Not listed as options.
    for (const char* hidden : {"\n  --framework", "\n  --ep"})
      EXPECT_FALSE(contains(help.output, hidden)) << command << ": " << hidden;
    EXPECT_TRUE(contains(help.output, "\n  --steps")) << "the pattern finds listed options";
    EXPECT_TRUE(contains(help.output, "\n  --tp ")) << "tensor parallelism runs";
    EXPECT_TRUE(contains(help.output, "\n  --pp ")) << "pipeline parallelism runs";
    EXPECT_TRUE(contains(help.output, "\n  --shard-group ")) << "hybrid sharding runs";
    EXPECT_TRUE(contains(help.output, "\n  --hpz ")) << "hpZ runs";
    EXPECT_TRUE(contains(help.output, "\n  --virtual-stages")) << "so does the interleaved one";
    EXPECT_TRUE(contains(help.output, "refused by name and not listed here")) << help.output;
  }
  // What the executor does not run of hybrid sharding is refused by name before anything runs.
  const Result offload =
      run("run -m gpt2-tiny --gpus 4 --stage 3 --shard-group 2 --offload-optimizer cpu --steps 1");
  EXPECT_EQ(offload.exit_code, 2) << offload.output;
  EXPECT_TRUE(contains(offload.output, "--shard-group: hybrid sharding with offload"))
      << offload.output;
  // qwZ and hpZ each run; their combination is refused by the flag of the quantized part.
  const Result both =
      run("run -m gpt2-tiny --gpus 4 --stage 3 --hpz 2 --quantized-weights true --steps 1");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_TRUE(contains(both.output,
                       "--quantized-weights: ZeRO++'s quantized collectives together with hpZ"))
      << both.output;
}

// Pipeline parallelism: every stage planned and listed, DeepSpeed's refusal of ZeRO-2/3 named; the
// interleaved schedule runs (exec.parallel.np4 holds its parity), so a run of it is refused only
// for what every pipeline run needs: here the processes to run its stages on.
TEST(CliMessages, PipelineStagesAreListedAndRefusalsNamed) {
  const Result plan = run("plan -m gpt2-124m -s 1 -p bf16 --grad-accum 8 --gpus 8 --pp 4");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_TRUE(contains(plan.output, "pipeline 4 stages (1f1b) x data parallel 2")) << plan.output;
  EXPECT_TRUE(contains(plan.output, "Pipeline stages")) << plan.output;
  EXPECT_TRUE(contains(plan.output, "h.9 .. lm_head")) << plan.output;
  EXPECT_TRUE(contains(plan.output, "send")) << plan.output;
  const Result zero3 = run("plan -m gpt2-124m -s 3 --gpus 8 --pp 2");
  EXPECT_EQ(zero3.exit_code, 2) << zero3.output;
  EXPECT_TRUE(contains(zero3.output, "ZeRO-2 and ZeRO-3 are incompatible")) << zero3.output;
  const Result executor = run("run -m gpt2-124m --pp 2 --virtual-stages 2 --grad-accum 2 --steps 1");
  EXPECT_EQ(executor.exit_code, 2) << executor.output;
  EXPECT_FALSE(contains(executor.output, "not yet run")) << executor.output;
  EXPECT_TRUE(contains(executor.output, "processes are running")) << executor.output;
}

namespace {

// ZeRO++ (issue 20) through the binary: its collectives listed by group, what is not modelled
// refused by key, and the executor's refusal named. The backward gathers the hpZ group serves are
// of layers forward released (a reuse distance of 0 releases every one).
TEST(CliMessages, ZeroPlusPlusIsListedByGroupAndRefusalsNamed) {
  const Result plan =
      run("plan -m gpt2-124m -s 3 -p bf16 --cluster dgx-a100-80gb --gpus 16 --hpz 8 "
          "--quantized-weights true --quantized-gradients true "
          "--set zero_optimization.stage3_max_reuse_distance=0");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  for (const char* row : {"all_gather             hpz 8", "all_to_all            node 8",
                          "all_to_all      cross-node 2"}) {
    EXPECT_TRUE(contains(plan.output, row)) << row << "\n" << plan.output;
  }
  const Result stage2 = run("plan -m gpt2-124m -s 2 --gpus 16 --hpz 8");
  EXPECT_EQ(stage2.exit_code, 2) << stage2.output;
  EXPECT_TRUE(contains(stage2.output, "zero_optimization.zero_hpz_partition_size"))
      << stage2.output;
  // qwZ runs with TP (over the DP group of each TP coordinate); hpZ and qgZ do not (DeepSpeed
  // builds their groups from the world's ranks).
  const Result quantized = run("plan -m gpt2-124m -s 3 --gpus 16 --tp 2 --quantized-weights true");
  EXPECT_EQ(quantized.exit_code, 0) << quantized.output;
  EXPECT_TRUE(contains(quantized.output, "all_gather       dp 8")) << quantized.output;
  const Result tensor = run("plan -m gpt2-124m -s 3 --gpus 16 --tp 2 --hpz 8");
  EXPECT_EQ(tensor.exit_code, 2) << tensor.output;
  EXPECT_TRUE(contains(tensor.output,
                       "zero_optimization.zero_hpz_partition_size: DeepSpeed builds "
                       "hpZ's secondary groups"))
      << tensor.output;
  // The executor runs qgZ: its node group's all-to-alls are listed (one rank: a node of one).
  const Result executor = run("run -m gpt2-tiny -s 3 --quantized-gradients true --steps 1");
  EXPECT_EQ(executor.exit_code, 0) << executor.output;
  EXPECT_TRUE(contains(executor.output, "node       all_to_all")) << executor.output;
}

}  // namespace

namespace {

// Issue 21's newcomer findings through the binary: the names people type are taken, a mistyped
// flag is named in the order typed with the closest flag, "auto" batch sizes say what to pass.
TEST(CliMessages, TheNamesANewcomerTypes) {
  const Result names =
      run("plan --model gpt2 --offload-optimizer CPU --stage 2 --precision bfloat16");
  EXPECT_EQ(names.exit_code, 0) << names.output;
  EXPECT_TRUE(contains(names.output, "gpt2-124m")) << names.output;
  EXPECT_TRUE(contains(names.output, "ZeRO-2, optimizer offload cpu, bf16")) << names.output;
  const Result hub = run("plan --model meta-llama/Llama-2-7b-hf");
  EXPECT_EQ(hub.exit_code, 0) << hub.output;
  EXPECT_TRUE(contains(hub.output, "llama2-7b (6.74B parameters)")) << hub.output;
  const Result flag = run("plan --micro-batch-size 4");
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  EXPECT_TRUE(
      contains(flag.output,
               "--micro-batch-size: not a flag of `zerolens plan` (did you mean '--micro-batch'?)"))
      << flag.output;
  const std::string config = ::testing::TempDir() + "/zerolens_auto_batch.json";
  std::FILE* file = std::fopen(config.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                 "zero_optimization": {"stage": 3}})",
             file);
  std::fclose(file);
  const Result automatic = run("plan -c " + quote(config));
  EXPECT_EQ(automatic.exit_code, 2) << automatic.output;
  EXPECT_TRUE(contains(automatic.output, "pass --micro-batch N")) << automatic.output;
  EXPECT_EQ(run("plan -c " + quote(config) + " --micro-batch 4").exit_code, 0);
}

// The seed systems through the binary (docs/seeds.md): ColossalAI's ShardedModelV2 config and its
// refusal of reuse_fp16_shard with gradient accumulation; ZeRO-Offload's delayed update flags.
TEST(CliMessages, SeedSystemsPlanAndRefuseByName) {
  const std::string config =
      quote(std::string(ZEROLENS_TEST_DATA) + "/colossalai/sharded_model_v2.json");
  const Result plan = run("plan --model gpt2-124m --gpus 8 --micro-batch 2 -c " + config);
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_TRUE(contains(plan.output,
                       "ColossalAI ShardedModelV2 (BucketTensorShardStrategy, "
                       "tensor_placement_policy cpu, reuse_fp16_shard"))
      << plan.output;
  const Result accumulating =
      run("plan --model gpt2-124m --gpus 8 --micro-batch 2 --grad-accum 4 -c " + config);
  EXPECT_EQ(accumulating.exit_code, 2) << accumulating.output;
  EXPECT_TRUE(
      contains(accumulating.output,
               "zero.model_config.reuse_fp16_shard: cannot be used with gradient accumulation"))
      << accumulating.output;
  const Result placement = run("plan --framework colossalai --placement gpu");
  EXPECT_EQ(placement.exit_code, 2) << placement.output;
  const Result delayed = run("plan --stage 2 --delayed-param-update true");
  EXPECT_EQ(delayed.exit_code, 2) << delayed.output;
  EXPECT_TRUE(contains(delayed.output,
                       "zero_optimization.delay_param_update: overlaps the CPU "
                       "optimizer step"))
      << delayed.output;
  const Result offload =
      run("plan --stage 2 --offload-optimizer cpu --delayed-param-update true --dpu-warmup 40");
  EXPECT_EQ(offload.exit_code, 0) << offload.output;
  EXPECT_TRUE(contains(offload.output, "delayed parameter update after 40 steps"))
      << offload.output;
}

}  // namespace

namespace {

// LoRA and QLoRA (issue 21) through the binary: the flags in --help, the count PEFT prints, the
// refusals by flag, and the executor's.
TEST(CliMessages, LoraFlagsCountsAndRefusals) {
  const Result help = run("plan --help");
  for (const char* flag : {"--lora-rank", "--lora-targets", "--quantize-base", "--lora-dropout"})
    EXPECT_TRUE(contains(help.output, flag)) << flag;
  const Result plan = run("plan -m llama2-7b --gpus 8 -s 2 -p bf16 --lora-rank 8");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_TRUE(contains(plan.output,
                       "LoRA r=8 on q_proj, v_proj: 4,194,304 trainable of "
                       "6,742,609,920 parameters (0.0622 %)"))
      << plan.output;
  const Result qlora = run("plan -m llama2-7b --gpus 1 -p bf16 --lora-rank 8 --quantize-base nf4");
  EXPECT_EQ(qlora.exit_code, 0) << qlora.output;
  EXPECT_TRUE(contains(qlora.output, "base weights in NF4 with double quantization"))
      << qlora.output;
  const std::pair<const char*, const char*> refusals[] = {
      {"plan -m llama2-7b --lora-rank 8 --lora-targets q_prj,v_proj",
       "--lora-targets: 'q_prj' is no module of llama2's blocks (did you mean 'q_proj'?)"},
      {"plan -m gpt2-124m --lora-rank 8 --lora-targets q_proj", "did you mean 'c_proj'?"},
      {"plan -m llama2-7b --quantize-base nf4", "--quantize-base: needs LoRA adapters"},
      {"plan -m llama2-7b --lora-targets q_proj", "--lora-targets: needs LoRA adapters"},
      {"plan -m llama2-7b --lora-rank 8 --tp 2", "--lora-rank: LoRA with tensor parallelism"},
      {"plan -m llama2-7b --lora-rank 8 --framework fsdp2",
       "--lora-rank: frozen parameters under FSDP"},
      {"plan -m llama2-7b -s 3 --lora-rank 8 --quantize-base nf4 --offload-param cpu",
       "--quantize-base: 4-bit base weights with zero_optimization.offload_param"},
      {"plan -m llama2-7b --lora-rank 0", "--lora-rank"},
      {"plan -m llama2-7b --lora-rank 8 --quantize-base int4", "--quantize-base"},
      {"run -m gpt2-tiny --lora-rank 4 --steps 1",
       "--lora-rank: zerolens run trains every parameter"},
  };
  for (const auto& [command, message] : refusals) {
    const Result refused = run(command);
    EXPECT_EQ(refused.exit_code, 2) << command << "\n" << refused.output;
    EXPECT_TRUE(contains(refused.output, message)) << command << "\n" << refused.output;
  }
}

}  // namespace

namespace {

// BERT and T5 (issue 21) through the binary: presets and configs, the target sequence in the
// header, refusals by flag.
TEST(CliMessages, EncoderModelsAndTheTargetSequence) {
  const Result help = run("plan --help");
  EXPECT_TRUE(contains(help.output, "--target-seq-len")) << help.output;
  const Result t5 =
      run("plan -m google-t5/t5-base --gpus 8 -s 2 -p bf16 -b 8 --seq-len 512 "
          "--target-seq-len 128");
  EXPECT_EQ(t5.exit_code, 0) << t5.output;
  EXPECT_TRUE(contains(t5.output, "t5-base (222.9M parameters)")) << t5.output;
  EXPECT_TRUE(contains(t5.output, "micro-batch 8 x seq 512 (target 128)")) << t5.output;
  const Result bert = run("plan -m bert-base-uncased --gpus 1 --lora-rank 8");
  EXPECT_EQ(bert.exit_code, 0) << bert.output;
  EXPECT_TRUE(contains(bert.output, "LoRA r=8 on query, value: 294,912 trainable")) << bert.output;
  const std::pair<const char*, const char*> refusals[] = {
      {"plan -m llama2-7b --target-seq-len 128", "--target-seq-len: applies to encoder-decoder"},
      {"plan -m t5-small --attention flash", "--attention: T5's relative position bias"},
      {"plan -m t5-small --gpus 8 --tp 2", "--tp: tensor parallelism of t5"},
      {"plan -m bert-base-uncased --gpus 8 -s 1 --pp 2 --grad-accum 4",
       "--pp: pipeline parallelism of bert"},
      {"plan -m t5-small --lora-rank 8 --lora-targets wi_0", "'wi_0' is no module of t5's blocks"},
  };
  for (const auto& [command, message] : refusals) {
    const Result refused = run(command);
    EXPECT_EQ(refused.exit_code, 2) << command << "\n" << refused.output;
    EXPECT_TRUE(contains(refused.output, message)) << command << "\n" << refused.output;
  }
}

}  // namespace
