// Files: malformed, truncated and wrong-version traces and bad configs give an error that names the
// problem while the current plan stays; configs and traces round trip; Chrome traces and images are
// written.
#include <gtest/gtest.h>
#include <QFile>
#include <QImage>

#include <fstream>
#include <sstream>

#include "gui/config_file.hpp"
#include "gui/main_window.hpp"
#include "gui_test_helpers.hpp"

namespace zerolens::gui {
namespace {

using nlohmann::json;
using testing::temp_file;

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

json predicted_trace_json() {
  const auto planned = plan_settings(walkthrough_settings());
  return trace_to_json(planned->predicted);
}

struct BadFile {
  std::string name, text, expected;  // the error names `expected`
};

std::vector<BadFile> bad_traces() {
  const std::string good = predicted_trace_json().dump();
  json version = predicted_trace_json();
  version["version"] = 2;
  json schema = predicted_trace_json();
  schema["schema"] = "something.else";
  json negative = predicted_trace_json();
  negative["ops"][3]["start_s"] = -1;
  json huge = predicted_trace_json();
  huge["ops"][5]["duration_s"] = 1e300;
  json stranger = predicted_trace_json();
  stranger["ops"][0]["rank"] = 77;
  json missing = predicted_trace_json();
  missing["ops"][2].erase("kind");
  json device = predicted_trace_json();
  device["run"]["optimizer_device"] = "tape";
  json twice = predicted_trace_json();
  twice["ranks"] = {0, 1, 1, 2};
  return {{"malformed", "{ \"schema\": zerolens", "invalid JSON"},
          {"truncated", good.substr(0, good.size() / 2), "invalid JSON"},
          {"empty", " ", "invalid JSON"},
          {"array", "[1, 2, 3]", "trace"},
          {"version", version.dump(), "version"},
          {"schema", schema.dump(), "schema"},
          {"negative", negative.dump(), "ops[3].start_s"},
          {"huge", huge.dump(), "ops[5].duration_s"},
          {"stranger", stranger.dump(), "ops[0].rank"},
          {"missing", missing.dump(), "ops[2].kind"},
          {"device", device.dump(), "run.optimizer_device"},
          {"twice", twice.dump(), "rank 1 is listed twice"}};
}

TEST(Files, BadTracesGiveANamedErrorAndKeepThePlan) {
  MainWindow window(default_settings(), false);
  const auto ops = window.session().op_count();
  for (const BadFile& bad : bad_traces()) {
    const std::string path = temp_file("trace_" + bad.name + ".json", bad.text);
    EXPECT_FALSE(window.open_trace_file(QString::fromStdString(path))) << bad.name;
    const std::string error = window.last_error().toStdString();
    EXPECT_NE(error.find(bad.expected), std::string::npos) << bad.name << ": " << error;
    EXPECT_NE(error.find(path), std::string::npos) << bad.name << ": " << error;
    EXPECT_EQ(window.session().loaded(), nullptr);
    EXPECT_EQ(window.session().op_count(), ops);
    EXPECT_EQ(window.session().settings().model_source, "gpt2-1.5b");
  }
  EXPECT_FALSE(window.open_trace_file("/nonexistent/trace.json"));
  EXPECT_TRUE(window.last_error().contains("/nonexistent/trace.json"));
}

TEST(Files, BadConfigsGiveANamedErrorAndKeepThePlan) {
  MainWindow window(default_settings(), false);
  json stage = settings_to_json(default_settings());
  stage["deepspeed"]["zero_optimization"]["stage"] = 7;
  json model = settings_to_json(default_settings());
  model["model"] = "no-such-model";
  json gpus = settings_to_json(default_settings());
  gpus["gpus"] = 0;
  json version = settings_to_json(default_settings());
  version["version"] = 9;
  json param =
      json::object({{"zero_optimization", {{"stage", 2}, {"offload_param", {{"device", "cpu"}}}}}});
  const std::vector<BadFile> bad = {{"stage", stage.dump(), "zero_optimization.stage"},
                                    {"model", model.dump(), "no-such-model"},
                                    {"gpus", gpus.dump(), "gpus"},
                                    {"version", version.dump(), "version"},
                                    {"param", param.dump(), "offload_param"},
                                    {"broken", "{\"zero_optimization\": {", "invalid JSON"}};
  for (const BadFile& b : bad) {
    const std::string path = temp_file("config_" + b.name + ".json", b.text);
    EXPECT_FALSE(window.open_config_file(QString::fromStdString(path))) << b.name;
    EXPECT_NE(window.last_error().toStdString().find(b.expected), std::string::npos)
        << b.name << ": " << window.last_error().toStdString();
    EXPECT_TRUE(window.session().error().isEmpty()) << b.name;
    EXPECT_EQ(window.session().planned()->plan.schedule.context.stage, 3) << b.name;
  }
  // The same DeepSpeed file through the panel: refused, and the panel keeps the working settings.
  EXPECT_FALSE(window.config_panel().load_deepspeed_file(
      QString::fromStdString(temp_file("config_param.json"))));
  EXPECT_TRUE(window.last_error().contains("offload_param"));
  EXPECT_EQ(window.session().settings().config.zero.stage, 3);
  EXPECT_FALSE(window.config_panel().load_model_file("/nonexistent/config.json"));
  EXPECT_TRUE(window.last_error().contains("/nonexistent/config.json"));
}

void expect_same_plan(const Settings& a, const Settings& b) {
  const auto pa = plan_settings(a), pb = plan_settings(b);
  EXPECT_EQ(pa->plan.schedule.ops.size(), pb->plan.schedule.ops.size());
  for (int d = 0; d < kDeviceCount; ++d)
    EXPECT_EQ(pa->plan.devices[std::size_t(d)].peak, pb->plan.devices[std::size_t(d)].peak);
  EXPECT_EQ(pa->plan.comm.links, pb->plan.comm.links);
}

TEST(Files, ConfigsRoundTripToTheSamePlan) {
  Settings from_file = default_settings();
  Diagnostics diagnostics;
  load_cluster_spec(from_file, std::string(ZEROLENS_TEST_DATA) + "/clusters/two-node-a100.json",
                    diagnostics);
  load_model_spec(from_file, std::string(ZEROLENS_TEST_DATA) + "/hf/gpt2.json", diagnostics);
  from_file.gpus = 16;
  for (const Settings& settings : {default_settings(), walkthrough_settings(), from_file}) {
    MainWindow window(settings, false);
    const std::string path = temp_file("roundtrip.json");
    ASSERT_TRUE(window.save_config_file(QString::fromStdString(path)))
        << window.last_error().toStdString();
    Diagnostics read_diagnostics;
    const Settings read = read_config_file(path, default_settings(), read_diagnostics);
    // Nothing but the note naming what the config sets and zerolens does not model (issue 19).
    for (const std::string& warning : read_diagnostics.warnings)
      EXPECT_EQ(warning.rfind("note: parsed, not modelled", 0), 0u) << warning;
    expect_same_plan(settings, read);
    ASSERT_TRUE(window.open_config_file(QString::fromStdString(path)));
    EXPECT_EQ(window.session().planned()->plan.device(Device::Gpu).peak,
              plan_settings(settings)->plan.device(Device::Gpu).peak);
  }
}

TEST(Files, SavedTraceOpensBesideThePrediction) {
  MainWindow window(walkthrough_settings(), false);
  const std::string path = temp_file("predicted.json");
  ASSERT_TRUE(window.save_trace_file(QString::fromStdString(path)));
  window.load_settings(default_settings());  // the trace brings its own run back
  ASSERT_TRUE(window.open_trace_file(QString::fromStdString(path)))
      << window.last_error().toStdString();
  const Session& session = window.session();
  ASSERT_NE(session.loaded(), nullptr);
  EXPECT_EQ(session.settings().model_source, "gpt2-tiny");
  EXPECT_EQ(session.loaded()->trace.ops.size(), session.planned()->predicted.ops.size());
  EXPECT_EQ(session.loaded()->notes.size(), 1u);  // "loaded a predicted trace": the op counts agree
  EXPECT_EQ(window.timeline().view().shown_trace(), &session.loaded()->trace);
  // The memory chart draws the loaded trace beside the prediction.
  const auto series = window.memory().charts().front()->chart()->series();
  int lines = 0;
  for (auto* s : series) lines += s->name().contains("loaded trace") ? 1 : 0;
  EXPECT_EQ(lines, 1);
}

TEST(Files, ExportsChromeTracesAndImages) {
  MainWindow window(walkthrough_settings(), false);
  window.resize(1000, 700);
  window.show();
  const std::string chrome = temp_file("chrome.json");
  ASSERT_TRUE(window.export_chrome_trace(QString::fromStdString(chrome)));
  EXPECT_FALSE(json::parse(read_text(chrome)).at("traceEvents").empty());
  const std::string png = temp_file("ranks.png"), svg = temp_file("timeline.svg");
  ASSERT_TRUE(window.export_view(View::Ranks, QString::fromStdString(png)))
      << window.last_error().toStdString();
  const QImage image(QString::fromStdString(png));
  EXPECT_EQ(image.size(), window.ranks().size());
  ASSERT_TRUE(window.export_view(View::Timeline, QString::fromStdString(svg)));
  EXPECT_NE(read_text(svg).find("<svg"), std::string::npos);
  EXPECT_FALSE(window.export_view(View::Ranks, QString::fromStdString(temp_file("ranks.bmpx"))));
  EXPECT_TRUE(window.last_error().contains("unknown image type"));
  EXPECT_FALSE(window.save_config_file("/nonexistent/dir/config.json"));
  EXPECT_TRUE(window.last_error().contains("/nonexistent/dir/config.json"))
      << window.last_error().toStdString();
  EXPECT_TRUE(window.last_error().contains("No such file or directory"))
      << window.last_error().toStdString();
}

}  // namespace
}  // namespace zerolens::gui
