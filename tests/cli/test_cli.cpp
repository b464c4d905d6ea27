// Runs the real `zerolens` binary: exit codes, error messages naming the key, and outputs that
// agree with the simulator's own figures.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_test_support.hpp"

namespace {

using zerolens::cli_testing::quote;
using zerolens::cli_testing::Result;
using zerolens::cli_testing::run;

std::string data(const std::string& name) { return quote(std::string(ZEROLENS_TEST_DATA) + "/" + name); }

void expect_invalid(const std::string& arguments, const std::string& message) {
  const Result result = run(arguments);
  EXPECT_EQ(result.exit_code, 2) << arguments << "\n" << result.output;
  EXPECT_NE(result.output.find(message), std::string::npos) << arguments << "\n" << result.output;
}

TEST(Cli, HelpEverywhere) {
  for (const char* command :
       {"--help", "plan --help", "presets --help", "trace --help", "sweep --help", "run --help", "validate --help"}) {
    const Result result = run(command);
    EXPECT_EQ(result.exit_code, 0) << command;
    EXPECT_NE(result.output.find("Usage"), std::string::npos) << command;
  }
  EXPECT_NE(run("plan --help").output.find("--offload-param"), std::string::npos);
}

TEST(Cli, DefaultPlanPrintsATableWithExplicitUnits) {
  const Result result = run("plan");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("GB = 1e9 bytes"), std::string::npos);
  EXPECT_NE(run("plan --units GiB").output.find("GiB = 2^30 bytes"), std::string::npos);
}

TEST(Cli, JsonHasTheDocumentedKeysAndModelStatesMatchTheZeroPaper) {
  // ZeRO paper, Table 1: 7.5B parameters, Nd = 64, P_os+g+p: 16 Psi / Nd = 1.875e9 bytes.
  const Result result = run("plan --model dense:7.5e9 --gpus 64 --stage 3 --precision fp16 --model-states-only --json", false);
  ASSERT_EQ(result.exit_code, 0);
  const auto document = nlohmann::json::parse(result.out);
  EXPECT_EQ(document.at("schema"), "zerolens.plan");
  const auto& gpu = document.at("devices").at("gpu").at("bytes");
  EXPECT_NEAR(gpu.at("total").get<double>(), 16 * 7.5e9 / 64, 16 * 7.5e9 / 64 * 1e-3);
  EXPECT_EQ(gpu.at("activations").get<std::int64_t>(), 0);
  EXPECT_EQ(gpu.at("overhead").get<std::int64_t>(), 0);
  for (const char* collective : {"all_gather", "reduce_scatter"}) {
    EXPECT_GT(document.at("comm").at("collectives").at(collective).at("calls").get<std::int64_t>(), 0);
  }
}

TEST(Cli, CsvAndOutputFile) {
  const std::string path = testing::TempDir() + "/zerolens_plan.csv";
  const Result result = run("plan --csv -o " + quote(path));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  EXPECT_EQ(line, "section,item,key,value");
  bool has_gpu_params = false;
  while (std::getline(file, line)) has_gpu_params = has_gpu_params || line.rfind("memory,gpu,params,", 0) == 0;
  EXPECT_TRUE(has_gpu_params);
}

TEST(Cli, InvalidInputNamesTheKeyAndExitsWithTwo) {
  expect_invalid("plan --stage 2 --offload-param cpu", "zero_optimization.offload_param.device");
  expect_invalid("plan --stage 3 --offload-optimizer nvme", "zero_optimization.offload_optimizer.nvme_path");
  expect_invalid("plan --gpus 8 --train-batch 10 --micro-batch 4", "do not multiply");
  expect_invalid("plan --reduce-bucket-size -5", "zero_optimization.reduce_bucket_size");
  expect_invalid("plan --set zero_optimization.reduce_bucket_size=lots", "zero_optimization.reduce_bucket_size");
  expect_invalid("plan --set nonsense", "--set");
  expect_invalid("plan --model gpt2-1.6b", "did you mean 'gpt2-1.5b'");
  expect_invalid("plan --cluster dgx-a100", "did you mean");
  expect_invalid("plan --stage 5", "--stage");
  expect_invalid("plan --offload-optimizer disk", "--offload-optimizer");
  expect_invalid("plan --micro-batch abc", "--micro-batch");
  expect_invalid("plan --deepspeed-config /nonexistent.json", "cannot read");
  expect_invalid("plan --hf-config " + data("deepspeed/zero2_offload.json"), "model_type");
  expect_invalid("plan --deepspeed-config " + data("hf/gpt2.json") + " --set zero_optimization.stage=9",
                 "zero_optimization.stage");
  expect_invalid("plan --compare --deepspeed-estimate", "choose one view");
  expect_invalid("plan --no-such-flag", "no-such-flag");
}

TEST(Cli, UnparseableJsonIsAnInputError) {
  const std::string path = testing::TempDir() + "/broken.json";
  std::ofstream(path) << "{\"zero_optimization\": {\"stage\": 2,";
  expect_invalid("plan --deepspeed-config " + quote(path), "invalid JSON");
}

TEST(Cli, UnknownConfigKeysAreWarnedNotFatal) {
  const std::string path = testing::TempDir() + "/typo.json";
  std::ofstream(path) << R"({"zero_optimization": {"stage": 2, "reduce_bucket_sise": 5e8}})";
  const Result result = run("plan --deepspeed-config " + quote(path));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("did you mean 'reduce_bucket_size'"), std::string::npos) << result.output;
}

TEST(Cli, FlagsOverrideTheConfigFile) {
  const Result from_file = run("plan --json --deepspeed-config " + data("deepspeed/zero2_offload.json"), false);
  const Result overridden =
      run("plan --json --deepspeed-config " + data("deepspeed/zero2_offload.json") + " --stage 1 --offload-optimizer none",
          false);
  ASSERT_EQ(from_file.exit_code, 0);
  ASSERT_EQ(overridden.exit_code, 0);
  const auto a = nlohmann::json::parse(from_file.out);
  const auto b = nlohmann::json::parse(overridden.out);
  EXPECT_EQ(a.at("config").at("zero_optimization").at("stage"), 2);
  EXPECT_EQ(b.at("config").at("zero_optimization").at("stage"), 1);
  EXPECT_GT(a.at("devices").at("cpu").at("bytes").at("optimizer_states").get<std::int64_t>(), 0);
  EXPECT_EQ(b.at("devices").at("cpu").at("bytes").at("optimizer_states").get<std::int64_t>(), 0);
}

TEST(Cli, RequireFitExitsWithOneWhenItDoesNotFit) {
  EXPECT_EQ(run("plan --model gpt3-175b --gpus 8 --require-fit").exit_code, 1);
  EXPECT_EQ(run("plan --model gpt2-124m --gpus 8 --precision bf16 --require-fit").exit_code, 0);
}

// Under --pp the pipeline engine's refusal of ZeRO-2/3 leaves those variants out, each on a line
// of its own with the planner's reason (text and JSON; the CSV keeps its rows and says so on
// stderr), instead of failing the whole comparison.
TEST(Cli, CompareUnderPipelineParallelismLeavesOutWhatThePlannerRefuses) {
  const std::string job =
      "plan --model gpt2-124m --cluster dgx-a100-80gb --gpus 8 --pp 2 --stage 1 --precision bf16 "
      "--compare";
  const Result text = run(job);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  int left_out = 0;
  for (std::size_t at = text.output.find("\nleft out: "); at != std::string::npos;
       at = text.output.find("\nleft out: ", at + 1)) {
    ++left_out;
    const std::string line = text.output.substr(at + 1, text.output.find('\n', at + 1) - at - 1);
    EXPECT_NE(
        line.find(": zero_optimization.stage: DeepSpeed's pipeline engine runs ZeRO stage 0 or 1"),
        std::string::npos)
        << line;
  }
  EXPECT_EQ(left_out, 7) << text.output;
  EXPECT_NE(text.output.find("ZeRO-1 + opt:cpu"), std::string::npos);

  const Result json = run(job + " --json", false);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const auto document = nlohmann::json::parse(json.out);
  std::vector<std::string> planned;
  for (const auto& row : document.at("variants")) planned.push_back(row.at("variant"));
  EXPECT_EQ(planned, (std::vector<std::string>{"DP", "ZeRO-1", "ZeRO-1 + opt:cpu"}));
  ASSERT_EQ(document.at("left_out").size(), 7u);
  EXPECT_EQ(document.at("left_out")[0].at("variant"), "ZeRO-2");
  EXPECT_NE(document.at("left_out")[0].at("reason").get<std::string>().find("stage is 2"),
            std::string::npos);

  const Result csv = run(job + " --csv", false);
  ASSERT_EQ(csv.exit_code, 0);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 1 + 3) << csv.out;
  const Result largest = run(
      "plan --model gpt2-124m --gpus 8 --pp 2 --stage 1 --precision bf16 --max-model gpt2 --json",
      false);
  ASSERT_EQ(largest.exit_code, 0) << largest.output;
  const auto search = nlohmann::json::parse(largest.out);
  EXPECT_EQ(search.at("variants").size(), 3u);
  EXPECT_EQ(search.at("left_out").size(), 7u);
  const Result csv_and_notes = run(job + " --csv");
  EXPECT_NE(csv_and_notes.output.find("left out: ZeRO-3 + opt:nvme + param:nvme: "),
            std::string::npos)
      << csv_and_notes.output;
}

TEST(Cli, PlanningViews) {
  const Result compare = run("plan --model gpt2-1.5b --cluster dgx-a100-40gb --gpus 8 --precision fp16 --compare");
  ASSERT_EQ(compare.exit_code, 0) << compare.output;
  for (const char* label : {"DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"}) EXPECT_NE(compare.output.find(label), std::string::npos) << label;
  const Result estimate = run("plan --model gpt2-1.5b --gpus 8 --deepspeed-estimate");
  ASSERT_EQ(estimate.exit_code, 0) << estimate.output;
  EXPECT_NE(estimate.output.find("ZeRO-3 opt:cpu param:cpu"), std::string::npos) << estimate.output;
  const Result largest = run("plan --cluster dgx-a100-80gb --gpus 8 --precision bf16 --max-model --json", false);
  ASSERT_EQ(largest.exit_code, 0);
  const auto rows = nlohmann::json::parse(largest.out).at("variants");
  ASSERT_GE(rows.size(), 4u);
  // More partitioning never shrinks the largest model that fits: DP <= ZeRO-1 <= ZeRO-2 <= ZeRO-3,
  // up to the allocator: at the capacity, stages that allocate the same bytes in another order can
  // reserve a few hundred MB more or less (ZeRO-1 and -2 here, whose peak is the same activations).
  for (std::size_t i = 1; i < 4; ++i) {
    EXPECT_LE(rows[i - 1].at("parameter_count").get<double>(),
              1.01 * rows[i].at("parameter_count").get<double>())
        << i;
  }
  EXPECT_LT(rows[0].at("parameter_count").get<double>(),
            rows[3].at("parameter_count").get<double>());
  // Issue 21: each row says what stops the next candidate up, a model that really does not fit.
  for (const auto& row : rows) {
    ASSERT_TRUE(row.contains("binding")) << row.dump();
    const auto& binding = row.at("binding");
    EXPECT_TRUE(binding.at("peak_bytes").get<double>() >
                    binding.at("capacity_bytes").get<double>() ||
                binding.at("allocator_out_of_memory").get<bool>())
        << row.dump();
  }
  // ZeRO-3's row through `plan --require-fit`: its answer fits, the model that stops it does not.
  const auto& zero3 = rows[3];
  ASSERT_EQ(zero3.at("variant"), "ZeRO-3");
  const std::string fit =
      "plan --cluster dgx-a100-80gb --gpus 8 --precision bf16 --stage 3 --require-fit --model ";
  EXPECT_EQ(run(fit + zero3.at("model").get<std::string>(), false).exit_code, 0);
  EXPECT_EQ(run(fit + zero3.at("binding").at("model").get<std::string>(), false).exit_code, 1);
  // The text names the workload every candidate was planned with.
  const Result text = run("plan --cluster dgx-a100-80gb --gpus 8 --max-model llama2");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find(
                "each candidate planned with fp32, Adam, micro-batch 1 x seq its own default, "
                "activation checkpointing off"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("llama2-7b: GPU "), std::string::npos) << text.output;
}

TEST(Cli, ExportedModelReadsBackWithTheSameCount) {
  const std::string path = testing::TempDir() + "/exported.json";
  ASSERT_EQ(run("presets --model-json llama2-7b > " + quote(path), false).exit_code, 0);
  const Result plan = run("plan --json --model " + quote(path), false);
  ASSERT_EQ(plan.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(plan.out).at("model").at("parameter_count").get<std::int64_t>(), 6'738'415'616);
}

TEST(Cli, TraceWalkthroughWritesBothTraces) {
  const std::string trace = testing::TempDir() + "/walk.json";
  const std::string chrome = testing::TempDir() + "/walk.chrome.json";
  const Result result = run("trace --walkthrough -o " + quote(trace) + " --chrome " + quote(chrome));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("all-gathers layer h.0's parameters"), std::string::npos) << result.output;
  // The walkthrough's teaching-size reduce bucket (sim/plan/walkthrough.hpp), as the GUI plans it:
  // three buckets, one reduce-scatter after each of h.1's, h.0's and the embedding's backward.
  EXPECT_NE(result.output.find("reduce-scatters gradient bucket 2"), std::string::npos);
  EXPECT_EQ(result.output.find("gradient bucket 3"), std::string::npos);
  std::ifstream trace_file(trace), chrome_file(chrome);
  const auto document = nlohmann::json::parse(trace_file);
  EXPECT_EQ(document.at("ranks").size(), 4u);
  EXPECT_EQ(document.at("run").at("stage"), 3);
  EXPECT_FALSE(nlohmann::json::parse(chrome_file).at("traceEvents").empty());
  expect_invalid("trace --ranks 9 --gpus 4", "--ranks");
  expect_invalid("trace --algorithm butterfly", "--algorithm");
}

// The sweep's winner, planned again by `zerolens trace` with every micro-step simulated, has the
// same step time and GPU peak (the sweep extrapolates micro-steps; trace does not).
TEST(Cli, SweepWinnerAgreesWithTraceOfTheSameConfig) {
  const std::string base = "--model llama2-7b --gpus 8 --precision bf16 --seq-len 2048 --train-batch 128";
  const Result sweep = run("sweep " + base + " --json", false);
  ASSERT_EQ(sweep.exit_code, 0) << sweep.output;
  const auto document = nlohmann::json::parse(sweep.out);
  EXPECT_EQ(document.at("schema"), "zerolens.sweep");
  EXPECT_EQ(document.at("train_batch_size"), 128);
  const auto& best = document.at("results").at(0);
  ASSERT_EQ(best.at("rank"), 1);
  const std::string trace = testing::TempDir() + "/best.json";
  const std::string flags = " --stage " + std::to_string(best.at("stage").get<int>()) +
                            " --offload-optimizer " + best.at("offload_optimizer").get<std::string>() +
                            " --offload-param " + best.at("offload_param").get<std::string>() +
                            " --micro-batch " + std::to_string(best.at("train_micro_batch_size_per_gpu").get<int>()) +
                            " --grad-accum " + std::to_string(best.at("gradient_accumulation_steps").get<int>()) +
                            " --activation-checkpointing " + (best.at("activation_checkpointing").get<bool>() ? "true" : "false");
  const Result traced = run("trace --model llama2-7b --gpus 8 --precision bf16 --seq-len 2048" + flags + " -o " + quote(trace));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  std::ifstream trace_file(trace);
  const auto summary = nlohmann::json::parse(trace_file).at("summary");
  EXPECT_NEAR(summary.at("step_time_s").get<double>(), best.at("step_time_s").get<double>(),
              1e-9 * best.at("step_time_s").get<double>());
  EXPECT_EQ(summary.at("peak_bytes").at("gpu"), best.at("peak_bytes").at("gpu"));
}

// The layout search: its winner, and the fastest pipelined point, planned again by `zerolens trace`
// from the layout's flags with every micro-step simulated, have the same step time and GPU peak.
TEST(Cli, SweepSearchPointsAgreeWithTraceOfTheSameLayout) {
  const std::string model = "--model llama2-7b --gpus 16 --precision bf16 --seq-len 2048";
  const Result sweep =
      run("sweep " + model + " --train-batch 64 --search-parallelism --json", false);
  ASSERT_EQ(sweep.exit_code, 0) << sweep.output;
  const auto document = nlohmann::json::parse(sweep.out);
  EXPECT_EQ(document.at("version"), 2);
  EXPECT_GT(document.at("families").size(), 10u);
  std::vector<nlohmann::json> checked{document.at("results").at(0)};
  for (const auto& result : document.at("results"))
    if (result.at("fits").get<bool>() && result.at("pipeline_parallel").get<int>() > 1) {
      checked.push_back(result);
      break;
    }
  ASSERT_EQ(checked.size(), 2u) << "no pipelined point fits";
  for (const auto& point : checked) {
    const auto flag = [&](const char* name, const char* key) {
      return std::string(" ") + name + " " + point.at(key).dump();
    };
    std::string flags = flag("--tp", "tensor_parallel") + flag("--pp", "pipeline_parallel") +
                        flag("--virtual-stages", "virtual_stages") +
                        flag("--sp", "sequence_parallel") + flag("--stage", "stage") +
                        flag("--micro-batch", "train_micro_batch_size_per_gpu") +
                        flag("--grad-accum", "gradient_accumulation_steps") +
                        flag("--activation-checkpointing", "activation_checkpointing") +
                        " --offload-optimizer " + point.at("offload_optimizer").get<std::string>() +
                        " --offload-param " + point.at("offload_param").get<std::string>();
    if (point.at("zeropp") == "all")
      flags += " --hpz 8 --quantized-weights true --quantized-gradients true";
    SCOPED_TRACE(flags);
    const std::string trace = testing::TempDir() + "/searched.json";
    const Result traced = run("trace " + model + flags + " -o " + quote(trace));
    ASSERT_EQ(traced.exit_code, 0) << traced.output;
    std::ifstream trace_file(trace);
    const auto summary = nlohmann::json::parse(trace_file).at("summary");
    EXPECT_NEAR(summary.at("step_time_s").get<double>(), point.at("step_time_s").get<double>(),
                1e-9 * point.at("step_time_s").get<double>());
    EXPECT_EQ(summary.at("peak_bytes").at("gpu"), point.at("peak_bytes").at("gpu"));
  }
  const Result table =
      run("sweep " + model + " --train-batch 64 --tp-sizes 1,2 --pp-sizes 1,2 --top 2");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  for (const char* text :
       {"layouts searched", "Pareto front", "Layouts (tensor x pipeline", "tp 2 x pp 2 x dp 4"})
    EXPECT_NE(table.output.find(text), std::string::npos) << text << "\n" << table.output;
  expect_invalid("sweep " + model + " --tp 2 --tp-sizes 1,2", "--tp/--tp-sizes");
  expect_invalid("sweep " + model + " --dp 16 --search-parallelism", "--dp");
  expect_invalid("sweep " + model + " --zeropp most", "--zeropp");
  expect_invalid("sweep " + model + " --stage 3 --hpz 8 --zeropp all", "--zeropp");
  expect_invalid("sweep " + model + " --jobs 0", "--jobs");
}

// A mixture-of-experts model's EP search: the fastest point, traced again from its flags, has the
// same step time and GPU peak (the sweep's request and the CLI's are built apart).
TEST(Cli, SweepExpertParallelPointAgreesWithTrace) {
  const std::string model = "--model " + data("hf/Mixtral-8x7B-v0.1.json") +
                            " --gpus 64 --cluster dgx-h100 --precision bf16 --seq-len 4096";
  const Result sweep = run("sweep " + model +
                               " --train-batch 128 --ep-sizes 2,4,8 --stages 1,2 "
                               "--optimizer-offloads none --param-offloads none --checkpointing on "
                               "--json",
                           false);
  ASSERT_EQ(sweep.exit_code, 0) << sweep.output;
  const auto best = nlohmann::json::parse(sweep.out).at("results").at(0);
  ASSERT_TRUE(best.at("fits").get<bool>());
  EXPECT_GT(best.at("expert_parallel").get<int>(), 1);
  const std::string flags =
      " --ep " + best.at("expert_parallel").dump() + " --stage " + best.at("stage").dump() +
      " --micro-batch " + best.at("train_micro_batch_size_per_gpu").dump() + " --grad-accum " +
      best.at("gradient_accumulation_steps").dump() + " --activation-checkpointing true";
  const std::string trace = testing::TempDir() + "/moe-searched.json";
  const Result traced = run("trace " + model + flags + " -o " + quote(trace));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  std::ifstream trace_file(trace);
  const auto summary = nlohmann::json::parse(trace_file).at("summary");
  EXPECT_NEAR(summary.at("step_time_s").get<double>(), best.at("step_time_s").get<double>(),
              1e-9 * best.at("step_time_s").get<double>());
  EXPECT_EQ(summary.at("peak_bytes").at("gpu"), best.at("peak_bytes").at("gpu"));
}

TEST(Cli, SweepTableCsvProgressAndErrors) {
  const std::string base = "sweep --model gpt2-1.5b --gpus 8 --train-batch 64";
  const Result table = run(base + " --top 3");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("configurations evaluated"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("Top 3 by predicted throughput"), std::string::npos) << table.output;
  const Result csv = run(base + " --csv --stages 1,2 --optimizer-offloads none --checkpointing off", false);
  ASSERT_EQ(csv.exit_code, 0);
  // 8 per GPU: micro-batches 1, 2, 4, 8 x stages 1, 2 = 8 rows and the header.
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 9) << csv.out;
  const Result progress = run(base + " --progress --stages 0 -o /dev/null");
  EXPECT_NE(progress.output.find("] 8/8 configurations"), std::string::npos) << progress.output;
  expect_invalid(base + " --stage 2 --stages 1,2", "--stage/--stages");
  expect_invalid(base + " --micro-batches 3", "no configuration left");
  expect_invalid(base + " --param-offloads disk", "--param-offloads");
  const Result none_fits = run("sweep --model gpt3-175b --gpus 1 --cluster dgx-a100-40gb --optimizer-offloads none --param-offloads none");
  EXPECT_EQ(none_fits.exit_code, 1) << none_fits.output;
  EXPECT_NE(none_fits.output.find("Nothing fits"), std::string::npos) << none_fits.output;
}

TEST(Cli, Presets) {
  const Result result = run("presets");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("124439808"), std::string::npos);
  EXPECT_NE(result.output.find("dgx-h100"), std::string::npos);
}

// The executor in one process (no mpirun): trains, writes a measured trace in the shared schema
// whose ops are the plan's, and validate holds the measurement to its tolerances.
TEST(Cli, RunWritesAMeasuredTraceOfThePlansOps) {
  const std::string measured = testing::TempDir() + "/measured.json";
  const std::string predicted = testing::TempDir() + "/predicted.json";
  const Result result = run("validate --stage 3 --steps 3 --param-persistence-threshold 0 --measured-trace " +
                            quote(measured) + " --predicted-trace " + quote(predicted));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("validation passed"), std::string::npos) << result.output;
  std::ifstream measured_file(measured), predicted_file(predicted);
  const auto exec_trace = nlohmann::json::parse(measured_file), sim_trace = nlohmann::json::parse(predicted_file);
  EXPECT_EQ(exec_trace.at("source"), "exec");
  EXPECT_EQ(sim_trace.at("source"), "sim");
  ASSERT_EQ(exec_trace.at("ops").size(), sim_trace.at("ops").size());
  for (std::size_t i = 0; i < exec_trace.at("ops").size(); ++i) {
    EXPECT_EQ(exec_trace["ops"][i]["kind"], sim_trace["ops"][i]["kind"]);
    EXPECT_EQ(exec_trace["ops"][i]["bytes"], sim_trace["ops"][i]["bytes"]);
  }
  EXPECT_GT(exec_trace.at("summary").at("step_time_s").get<double>(), 0);
}

TEST(Cli, ValidateFailsBeyondItsToleranceAndRunRefusesBadInput) {
  const Result strict = run("validate --steps 1 --log-every 0 --peak-tolerance 0.000001");
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_NE(strict.output.find("FAIL"), std::string::npos) << strict.output;
  expect_invalid("run --steps 1 --gpus 2", "mpirun -np 2");
  expect_invalid("run --steps 1 --model llama2-7b", "model.norm");
  expect_invalid("run --steps 1 --inject-fault die:x", "--inject-fault");
  expect_invalid("run --steps 0", "--steps");
}

}  // namespace
