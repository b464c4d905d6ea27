#pragma once
// The config panel: model, DeepSpeed config, cluster, GPUs, tensor and sequence parallelism, ZeRO
// stage, offload, precision, micro-batch, sequence length and activation checkpointing. Every
// change re-plans at once; the panel shows the plan's verdict or the error that names the bad
// setting.
#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QWidget>
#include <functional>

#include "gui/session.hpp"

namespace zerolens::gui {

class ConfigPanel : public QWidget {
  Q_OBJECT

 public:
  // `report_error` shows a problem with a file the user picked (a dialog in the application).
  ConfigPanel(Session& session, std::function<void(const QString&)> report_error,
              QWidget* parent = nullptr);

  // Widget access for tests and the headless command.
  QComboBox& stage() { return *stage_; }
  QComboBox& offload_optimizer() { return *offload_optimizer_; }
  QComboBox& offload_param() { return *offload_param_; }
  QComboBox& placement() { return *placement_; }
  QComboBox& shard_strategy() { return *shard_strategy_; }
  QCheckBox& delayed_update() { return *delayed_update_; }
  QComboBox& model() { return *model_; }
  QSpinBox& gpus() { return *gpus_; }
  QSpinBox& tensor_parallel() { return *tensor_parallel_; }
  QSpinBox& pipeline_parallel() { return *pipeline_parallel_; }
  QSpinBox& expert_parallel() { return *expert_parallel_; }
  QCheckBox& sequence_parallel() { return *sequence_parallel_; }
  QLabel& status() { return *status_; }
  QLabel& deepspeed() { return *deepspeed_; }

  // Loads a file into the settings and re-plans; false (and the error reported) when it fails.
  bool load_model_file(const QString& path);
  bool load_cluster_file(const QString& path);
  bool load_deepspeed_file(const QString& path);

 signals:
  void walkthroughRequested();
  void defaultsRequested();

 private:
  QWidget* make_form();
  void show_settings();
  void show_status();
  void edit(const std::function<void(Settings&)>& change);
  bool load(const QString& what, const std::function<void(Settings&, Diagnostics&)>& change);
  void pick_model_file();
  void pick_cluster_file();
  void pick_deepspeed_file();

  Session& session_;
  std::function<void(const QString&)> report_error_;
  QComboBox* model_;
  QComboBox* cluster_;
  QLabel* deepspeed_;
  QSpinBox* gpus_;
  QSpinBox* tensor_parallel_;
  QSpinBox* pipeline_parallel_;
  QSpinBox* expert_parallel_;
  QCheckBox* sequence_parallel_;
  QComboBox* stage_;
  QComboBox* offload_optimizer_;
  QComboBox* offload_param_;
  QComboBox* placement_;       // DeepSpeed, or ColossalAI's cuda / cpu / auto
  QComboBox* shard_strategy_;  // ColossalAI's
  QCheckBox* delayed_update_;  // ZeRO-Offload's DPU
  QComboBox* precision_;
  QSpinBox* micro_batch_;
  QSpinBox* seq_len_;
  QCheckBox* checkpointing_;
  QLabel* status_;
  QLabel* notes_;
  QStringList warnings_;  // from the last file loaded
};

}  // namespace zerolens::gui
