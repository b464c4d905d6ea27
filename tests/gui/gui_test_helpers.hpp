#pragma once
// Shared by the GUI tests: the walkthrough in every DP/ZeRO/offload variant, and scene queries.
#include <QGraphicsItem>
#include <QGraphicsRectItem>
#include <QGraphicsScene>
#include <QProcess>
#include <QStringList>
#include <fstream>
#include <string>
#include <vector>

#include "gui/scene_items.hpp"
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
