#include <gtest/gtest.h>

#include "sim/report/plan_json.hpp"
#include "test_helpers.hpp"

namespace zerolens {
namespace {

Plan sample_plan() {
  TrainingConfig config = testing::mixed_adam(3);
  config.zero.offload_optimizer.device = OffloadDevice::Cpu;
  return testing::plan_of(testing::flat_model(6, 500'000), config, 16, 8);
}

TEST(PlanJson, RoundTripKeepsEveryFigure) {
  const Plan plan = sample_plan();
  const nlohmann::json document = plan_to_json(plan);
  const nlohmann::json reparsed = nlohmann::json::parse(document.dump());
  EXPECT_EQ(plan_figures_from_json(reparsed), plan_figures(plan));
}

TEST(PlanJson, HasTheDocumentedKeys) {
  const nlohmann::json document = plan_to_json(sample_plan());
  EXPECT_EQ(document.at("schema"), "zerolens.plan");
  EXPECT_EQ(document.at("version"), kPlanJsonVersion);
  for (const char* device : {"gpu", "cpu", "nvme"}) {
    const auto& bytes = document.at("devices").at(device).at("bytes");
    Bytes sum = 0;
    for (const char* category : {"params", "grads", "master_params", "optimizer_states", "activations", "buffers", "overhead"}) {
      ASSERT_TRUE(bytes.contains(category)) << device << " " << category;
      sum += bytes.at(category).get<Bytes>();
    }
    EXPECT_EQ(sum, bytes.at("total").get<Bytes>()) << device;
  }
  for (const char* collective : {"all_reduce", "reduce_scatter", "all_gather", "broadcast"}) {
    EXPECT_TRUE(document.at("comm").at("collectives").contains(collective)) << collective;
  }
  EXPECT_GT(document.at("comm").at("collectives").at("all_gather").at("calls").get<std::int64_t>(), 0);
  EXPECT_GT(document.at("comm").at("links").at("inter_node").at("bytes").get<Bytes>(), 0);
}

TEST(PlanJson, RejectsWrongVersionAndNamesMissingKeys) {
  nlohmann::json document = plan_to_json(sample_plan());
  document["version"] = 99;
  try {
    plan_figures_from_json(document);
    FAIL() << "expected an error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "version");
  }
  document = plan_to_json(sample_plan());
  document["devices"]["cpu"]["bytes"].erase("grads");
  try {
    plan_figures_from_json(document);
    FAIL() << "expected an error";
  } catch (const InputError& error) {
    EXPECT_EQ(error.where(), "devices.cpu.bytes.grads");
  }
}

}  // namespace
}  // namespace zerolens
