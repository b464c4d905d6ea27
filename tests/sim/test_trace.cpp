// The trace schema (traces/README.md) and the Chrome Trace Event Format export.
#include <map>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "sim/trace/chrome_trace.hpp"
#include "sim/trace/trace.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

using nlohmann::json;

Trace sample_trace(int ranks) {
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.stage3_param_persistence_threshold = 0;
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  PlanRequest request = testing::plan_of(testing::flat_model(5, 40'000), config, 4, 8).request;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 4, 8);  // a cluster a file can hold
  const Plan plan = make_plan(request);
  const Timeline timeline = simulate_timeline(plan.schedule, cluster_from_preset("dgx-a100-80gb"), TimelineOptions{});
  return make_trace(plan, timeline, ranks);
}

TEST(Trace, RoundTripKeepsEveryOp) {
  const Trace trace = sample_trace(2);
  const json document = trace_to_json(trace);
  const Trace copy = trace_from_json(json::parse(document.dump()));
  EXPECT_EQ(trace_to_json(copy), document);
  EXPECT_EQ(copy.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(copy.ops.size(), trace.ops.size());
  EXPECT_EQ(document.at("schema"), "zerolens.trace");
}

// A trace carries what it was planned from: planning its inputs again gives the same schedule,
// op for op, and the same memory (checked on a config far from every default).
TEST(Trace, InputsPlanTheSameSchedule) {
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.stage3_param_persistence_threshold = 1000;
  config.zero.reduce_bucket_size = 30'000;
  config.zero.stage3_prefetch_bucket_size = 50'000;
  config.zero.offload_param.device = OffloadDevice::Nvme;
  config.zero.offload_param.nvme_path = "/local_nvme";
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  config.activation_checkpointing.enabled = true;
  config.seq_len = 96;
  PlanRequest request = testing::plan_of(testing::flat_model(5, 40'000), config, 4, 8).request;
  request.cluster = with_ranks(cluster_from_preset("dgx-a100-80gb"), 4, 2);
  request.options.cuda_context_bytes = 123;
  request.options.allocator = AllocatorSpec{.kind = AllocatorKind::Flat};
  const Plan plan = make_plan(request);
  const Timeline timeline = simulate_timeline(plan.schedule, plan.request.cluster, TimelineOptions{});
  const Trace copy = trace_from_json(json::parse(trace_to_json(make_trace(plan, timeline, 1)).dump()));
  ASSERT_TRUE(copy.run.inputs.has_value());
  EXPECT_GT(timeline.exposed_offload, 0);  // CPU Adam and the NVMe swaps, kept apart
  EXPECT_DOUBLE_EQ(copy.summary.exposed_offload, timeline.exposed_offload);
  EXPECT_DOUBLE_EQ(copy.summary.exposed_communication, timeline.exposed_communication);
  PlanRequest again = request;
  again.model = copy.run.inputs->model;
  again.config = copy.run.inputs->config;
  again.cluster = copy.run.inputs->cluster;
  again.options = copy.run.inputs->options;
  const Plan replanned = make_plan(again);
  ASSERT_EQ(replanned.schedule.ops.size(), plan.schedule.ops.size());
  for (std::size_t i = 0; i < plan.schedule.ops.size(); ++i) {
    EXPECT_EQ(replanned.schedule.ops[i].kind, plan.schedule.ops[i].kind) << i;
    EXPECT_EQ(replanned.schedule.ops[i].bytes, plan.schedule.ops[i].bytes) << i;
  }
  for (std::size_t d = 0; d < plan.devices.size(); ++d) {
    EXPECT_EQ(replanned.devices[d].peak, plan.devices[d].peak) << d;
  }
  json broken = trace_to_json(make_trace(plan, timeline, 1));
  broken["run"]["inputs"]["deepspeed_config"]["zero_optimization"]["stage"] = 7;
  EXPECT_THROW(trace_from_json(broken), InputError);
}

TEST(Trace, OpsCarryTimesBytesAndMemory) {
  const Trace trace = sample_trace(1);
  double last_end = 0;
  bool saw_collective = false, saw_copy = false;
  for (const auto& op : trace.ops) {
    EXPECT_GE(op.duration, 0);
    last_end = std::max(last_end, op.start + op.duration);
    saw_collective = saw_collective || (op.link == "network" && op.bytes > 0);
    saw_copy = saw_copy || op.link == "pcie_d2h";
    EXPECT_GT(op.memory_after[0], 0);
  }
  EXPECT_TRUE(saw_collective);
  EXPECT_TRUE(saw_copy);
  EXPECT_DOUBLE_EQ(last_end, trace.summary.step_time);
}

TEST(Trace, InvalidDocumentsNameTheKey) {
  json document = trace_to_json(sample_trace(1));
  auto key_of = [](const json& bad) {
    try {
      trace_from_json(bad);
    } catch (const InputError& error) {
      return error.where();
    }
    return std::string("(no error)");
  };
  json wrong = document;
  wrong["version"] = 2;
  EXPECT_EQ(key_of(wrong), "version");
  wrong = document;
  wrong["ops"][3].erase("start_s");
  EXPECT_EQ(key_of(wrong), "ops[3].start_s");
  wrong = document;
  wrong["ops"][0]["duration_s"] = -1;
  EXPECT_EQ(key_of(wrong), "ops[0].duration_s");
  wrong = document;
  wrong["ops"][1]["memory_after"]["gpu"] = "lots";
  EXPECT_EQ(key_of(wrong), "ops[1].memory_after.gpu");
  EXPECT_EQ(key_of(json::array()), "trace");
}

// Trace Event Format: every event has ph, pid and tid; "X" events have name, ts and dur in
// microseconds; "C" counters carry numeric args; "M" metadata names processes and threads.
TEST(ChromeTrace, FollowsTheTraceEventFormat) {
  const Trace trace = sample_trace(2);
  const json chrome = chrome_trace_json(trace);
  const json& events = chrome.at("traceEvents");
  std::set<std::pair<int, int>> named_threads;
  std::set<int> named_processes;
  std::size_t complete = 0, counters = 0;
  std::map<int, double> last_counter;  // per rank: the memory counters follow program order in time
  for (const auto& event : events) {
    const std::string ph = event.at("ph");
    ASSERT_TRUE(event.at("pid").is_number_integer());
    if (ph == "M") {
      if (event.at("name") == "thread_name") named_threads.insert({event.at("pid").get<int>(), event.at("tid").get<int>()});
      if (event.at("name") == "process_name") named_processes.insert(event.at("pid").get<int>());
    } else if (ph == "X") {
      ++complete;
      ASSERT_TRUE(event.at("tid").is_number_integer());
      EXPECT_TRUE(named_threads.count({event.at("pid").get<int>(), event.at("tid").get<int>()}));
      EXPECT_GE(event.at("dur").get<double>(), 0);
      EXPECT_TRUE(event.at("name").is_string());
    } else if (ph == "C") {
      ++counters;
      for (const auto& value : event.at("args")) EXPECT_TRUE(value.is_number());
      const int pid = event.at("pid").get<int>();
      const double ts = event.at("ts").get<double>();
      if (last_counter.count(pid)) {
        EXPECT_GE(ts, last_counter[pid]);
      }
      last_counter[pid] = ts;
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  EXPECT_EQ(complete, trace.ops.size());
  EXPECT_EQ(counters, trace.ops.size());
  EXPECT_EQ(named_processes, (std::set<int>{0, 1}));
  // ts and dur are microseconds: the last event ends at the step time x 1e6.
  double end = 0;
  for (const auto& event : events) {
    if (event.at("ph") == "X") end = std::max(end, event.at("ts").get<double>() + event.at("dur").get<double>());
  }
  EXPECT_NEAR(end, trace.summary.step_time * 1e6, 1e-6);
}

}  // namespace
}  // namespace zerolens
