#pragma once
// Shared by the GUI tests: the walkthrough in every DP/ZeRO/offload variant, and scene queries.
#include <QGraphicsItem>
#include <QGraphicsRectItem>
#include <QGraphicsScene>
#include <QProcess>
#include <QStringList>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "gui/command_line.hpp"
#include "gui/scene_items.hpp"
#include "sim/core/error.hpp"
#include "gui/settings.hpp"
#include "sim/plan/variants.hpp"

namespace zerolens::gui::testing {

// The 4-GPU walkthrough (every tensor partitioned) in another stage/offload variant.
inline Settings variant_settings(const Variant& variant) {
  Settings settings = walkthrough_settings();
  set_stage(settings, variant.stage);
  set_offload(settings, variant.offload_optimizer, variant.offload_param);
  return settings;
}

// LLaMA-2 7B on 64 GPUs of dgx-a100-80gb at ZeRO-3 with the given offloads, otherwise the CLI's
// defaults: a step large enough that ops run out of program order and narrower than a pixel.
inline Settings llama_on_64(OffloadDevice optimizer, OffloadDevice param) {
  Settings settings = cli_default_settings();
  Diagnostics diagnostics;
  load_model_spec(settings, "llama2-7b", diagnostics);
  settings.gpus = 64;
  set_stage(settings, 3);
  set_offload(settings, optimizer, param);
  return settings;
}

// The GUI's command line: its program name, then `list`.
inline QStringList args(std::initializer_list<const char*> list) {
  QStringList out{"zerolens-gui"};
  for (const char* a : list) out << a;
  return out;
}

// Each command line is refused by parse_command_line with a message that contains its text.
inline void expect_refused(const std::vector<std::pair<QStringList, std::string>>& cases) {
  for (const auto& [arguments, expected] : cases) {
    try {
      parse_command_line(arguments);
      ADD_FAILURE() << "accepted " << arguments.join(' ').toStdString();
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  }
}

inline std::vector<QGraphicsItem*> items_with_role(const QGraphicsScene& scene, ItemRole role) {
  std::vector<QGraphicsItem*> found;
  for (QGraphicsItem* item : scene.items()) {
    if (item->data(item_key::Role).toInt() == int(role)) found.push_back(item);
  }
  return found;
}

inline double height_of(const QGraphicsItem* item) {
  return static_cast<const QGraphicsRectItem*>(item)->rect().height();
}

inline int data_int(const QGraphicsItem* item, int key) {
  return item->data(key).toInt();
}
inline Bytes data_bytes(const QGraphicsItem* item) {
  return item->data(item_key::Bytes).toLongLong();
}

inline std::string temp_file(const std::string& name, const std::string& text = "") {
  const std::string path = ::testing::TempDir() + "/zerolens_gui_" + name;
  if (!text.empty()) std::ofstream(path) << text;
  return path;
}

// zerolens-gui run as a user runs it, without a display (--screenshot picks the offscreen
// platform itself): its exit code and what it printed.
struct GuiRun {
  int exit_code;
  std::string output;
};

inline GuiRun run_gui(const QStringList& arguments) {
  QProcess process;
  QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
  environment.remove("QT_QPA_PLATFORM");
  environment.remove("DISPLAY");
  process.setProcessEnvironment(environment);
  process.setProcessChannelMode(QProcess::MergedChannels);
  process.start(ZEROLENS_GUI_BINARY, arguments);
  if (!process.waitForFinished(120000)) return {-1, "timed out"};
  return {process.exitCode(), process.readAll().toStdString()};
}

}  // namespace zerolens::gui::testing
