#include "gui/config_panel.hpp"

#include "gui/op_words.hpp"
#include "sim/model/presets.hpp"

#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QSignalBlocker>
#include <QVBoxLayout>

namespace zerolens::gui {
namespace {

QComboBox* combo(const QStringList& items, const QString& tip, QWidget* parent) {
  auto* box = new QComboBox(parent);
  box->addItems(items);
  box->setToolTip(tip);
  // A long file path elides instead of widening the panel (and pushing its buttons out).
  box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  box->setMinimumContentsLength(14);
  return box;
}

QStringList names(const std::vector<std::string>& list) {
  QStringList out;
  for (const auto& name : list) out << QString::fromStdString(name);
  return out;
}

// Selects `source` in a combo of presets, adding it first when it is a file or dense:<N>.
void select_source(QComboBox& box, const std::string& source) {
  const QString text = QString::fromStdString(source);
  int index = box.findText(text);
  if (index < 0) {
    box.insertItem(0, text);
    box.setItemData(0, text, Qt::ToolTipRole);  // the whole path, where the box elides it
    index = 0;
  }
  box.setCurrentIndex(index);
}

QWidget* row(QWidget* main, QPushButton* button, QWidget* parent) {
  auto* box = new QWidget(parent);
  auto* layout = new QHBoxLayout(box);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(main, 1);
  layout->addWidget(button);
  return box;
}

QString peak_words(const Plan& plan, Device device, const char* name, const char* scope) {
  const DeviceReport& d = plan.device(device);
  return QString("%1 %2 of %3 %4 (%5)")
      .arg(name)
      .arg(QString::fromStdString(d.peak < Bytes{10'000'000} ? human_bytes(d.peak) : format_bytes(d.peak, SizeUnit::GB)))
      .arg(QString::fromStdString(format_bytes(d.capacity, SizeUnit::GB)))
      .arg(scope)
      .arg(d.fits() ? "fits" : "does NOT fit");
}

}  // namespace

ConfigPanel::ConfigPanel(Session& session, std::function<void(const QString&)> report_error,
                         QWidget* parent)
    : QWidget(parent), session_(session), report_error_(std::move(report_error)) {
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(make_form());
  auto* examples = new QHBoxLayout;
  auto* walkthrough = new QPushButton("4-GPU walkthrough", this);
  walkthrough->setToolTip(
      "The ZeRO-3 toy step of the walkthrough: gpt2-tiny on 4 GPUs, every tensor partitioned");
  auto* example = new QPushButton("GPT-2 1.5B example", this);
  example->setToolTip("GPT-2 1.5B on 8 x A100-40GB, ZeRO-3 with the optimizer on the CPU");
  examples->addWidget(walkthrough);
  examples->addWidget(example);
  layout->addLayout(examples);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  notes_ = new QLabel(this);
  notes_->setWordWrap(true);
  notes_->setStyleSheet("color: #555;");
  layout->addWidget(status_);
  layout->addWidget(notes_);
  layout->addStretch();
  connect(walkthrough, &QPushButton::clicked, this, &ConfigPanel::walkthroughRequested);
  connect(example, &QPushButton::clicked, this, &ConfigPanel::defaultsRequested);
  connect(&session_, &Session::planChanged, this, &ConfigPanel::show_settings);
  connect(&session_, &Session::planFailed, this, &ConfigPanel::show_settings);
  connect(&session_, &Session::traceChanged, this, &ConfigPanel::show_status);
  show_settings();
}

QWidget* ConfigPanel::make_form() {
  auto* form_widget = new QWidget(this);
  auto* form = new QFormLayout(form_widget);
  model_ = combo(names(model_preset_names()),
                 "A preset, or a Hugging Face config.json / layer-list JSON (File...)", this);
  cluster_ =
      combo(names(cluster_preset_names()), "A cluster preset, or a cluster JSON (File...)", this);
  deepspeed_ = new QLabel("(none: DeepSpeed defaults)", this);
  deepspeed_->setWordWrap(true);
  gpus_ = new QSpinBox(this);
  gpus_->setRange(1, 1'000'000);
  gpus_->setToolTip(
      "Every rank (one per GPU): data parallel x tensor parallel. ZeRO partitions over the "
      "data-parallel group of GPUs / TP ranks");
  tensor_parallel_ = new QSpinBox(this);
  tensor_parallel_->setRange(1, 4096);
  tensor_parallel_->setSpecialValueText("1 (none)");
  tensor_parallel_->setToolTip(
      "tensor_parallel.autotp_size: ranks of a tensor-parallel group (Megatron's layout, placed "
      "innermost); the GPUs must be a multiple of it");
  pipeline_parallel_ = new QSpinBox(this);
  pipeline_parallel_->setRange(1, 4096);
  pipeline_parallel_->setSpecialValueText("1 (none)");
  pipeline_parallel_->setToolTip(
      "pipeline.stages: the layers split into this many stages (1F1B; ZeRO stage 0 or 1); the GPUs "
      "must be a multiple of tensor x pipeline parallel, and the views show the stage with the "
      "most "
      "GPU memory");
  expert_parallel_ = new QSpinBox(this);
  expert_parallel_->setRange(1, 4096);
  expert_parallel_->setSpecialValueText("1 (none)");
  expert_parallel_->setToolTip(
      "moe.ep_size (DeepSpeed MoE's ep_size): a mixture-of-experts model's experts split over this "
      "many data-parallel ranks, tokens exchanged by all-to-all; ZeRO stage 0-2");
  sequence_parallel_ = new QCheckBox("split along the sequence", this);
  sequence_parallel_->setToolTip(
      "Sequence parallelism with tensor parallelism (Megatron's --sequence-parallel): norms, "
      "dropout and the residual stream split over the TP group");
  stage_ = combo({"0: plain data parallelism", "1: partition optimizer states", "2: + gradients",
                  "3: + parameters"},
                 "zero_optimization.stage", this);
  offload_optimizer_ = combo({"none", "cpu", "nvme"},
                             "zero_optimization.offload_optimizer.device (stage 1-3)", this);
  offload_param_ =
      combo({"none", "cpu", "nvme"}, "zero_optimization.offload_param.device (stage 3 only)", this);
  placement_ = combo({"DeepSpeed (offload below)", "ColossalAI: cuda", "ColossalAI: cpu",
                      "ColossalAI: auto (Gemini)"},
                     "Who places the states: DeepSpeed's ZeRO with the offload settings below, or "
                     "ColossalAI's ShardedModelV2 (stage 3, fp16) with tensor_placement_policy "
                     "cuda (all on the GPU), cpu (shards, gradients and optimizer on the host) or "
                     "auto (Gemini moves shards from the warm-up step's memory statistics)",
                     this);
  shard_strategy_ = combo({"TensorShardStrategy", "BucketTensorShardStrategy"},
                          "ColossalAI: one all-gather per tensor, or per module (its shards "
                          "flattened: a bias rides with its weight)",
                          this);
  delayed_update_ = new QCheckBox("delayed parameter update (DPU)", this);
  delayed_update_->setToolTip(
      "ZeRO-Offload's one-step delayed parameter update (zero_optimization.delay_param_update; "
      "stage 1-2 with the optimizer on the CPU): the CPU step of the previous step's gradients "
      "runs beside this step's forward and backward");
  precision_ =
      combo({"fp32", "fp16", "bf16"},
            "Training precision (fp16/bf16: mixed precision with fp32 master weights)", this);
  micro_batch_ = new QSpinBox(this);
  micro_batch_->setRange(1, 1 << 20);
  micro_batch_->setToolTip(
      "train_micro_batch_size_per_gpu (gradient accumulation stays, the global batch follows)");
  seq_len_ = new QSpinBox(this);
  seq_len_->setRange(0, 1 << 24);
  seq_len_->setSpecialValueText("model default");
  checkpointing_ = new QCheckBox("every transformer block", this);
  auto* model_file = new QPushButton("File...", this);
  auto* cluster_file = new QPushButton("File...", this);
  auto* deepspeed_file = new QPushButton("Open...", this);
  deepspeed_file->setToolTip(
      "A DeepSpeed config JSON (or ColossalAI zero fields); the widgets below then edit it");
  form->addRow("Model", row(model_, model_file, this));
  form->addRow("DeepSpeed config", row(deepspeed_, deepspeed_file, this));
  form->addRow("Cluster", row(cluster_, cluster_file, this));
  form->addRow("GPUs (all ranks)", gpus_);
  form->addRow("Tensor parallel", tensor_parallel_);
  form->addRow("Sequence parallel", sequence_parallel_);
  form->addRow("Pipeline stages", pipeline_parallel_);
  form->addRow("Expert parallel", expert_parallel_);
  form->addRow("ZeRO stage", stage_);
  form->addRow("Offload optimizer", offload_optimizer_);
  form->addRow("Offload parameters", offload_param_);
  form->addRow("Placement policy", placement_);
  form->addRow("Shard strategy", shard_strategy_);
  form->addRow("Optimizer step", delayed_update_);
  form->addRow("Precision", precision_);
  form->addRow("Micro-batch per GPU", micro_batch_);
  form->addRow("Sequence length", seq_len_);
  form->addRow("Activation checkpointing", checkpointing_);
  connect(model_file, &QPushButton::clicked, this, &ConfigPanel::pick_model_file);
  connect(cluster_file, &QPushButton::clicked, this, &ConfigPanel::pick_cluster_file);
  connect(deepspeed_file, &QPushButton::clicked, this, &ConfigPanel::pick_deepspeed_file);
  connect(model_, &QComboBox::activated, this, [this] {
    load("model", [spec = model_->currentText().toStdString()](Settings& s, Diagnostics& d) {
      load_model_spec(s, spec, d);
    });
  });
  connect(cluster_, &QComboBox::activated, this, [this] {
    load("cluster", [spec = cluster_->currentText().toStdString()](Settings& s, Diagnostics& d) {
      load_cluster_spec(s, spec, d);
    });
  });
  connect(gpus_, &QSpinBox::valueChanged, this,
          [this](int n) { edit([n](Settings& s) { s.gpus = n; }); });
  connect(tensor_parallel_, &QSpinBox::valueChanged, this,
          [this](int n) { edit([n](Settings& s) { set_tensor_parallel(s, n); }); });
  connect(pipeline_parallel_, &QSpinBox::valueChanged, this,
          [this](int n) { edit([n](Settings& s) { set_pipeline_parallel(s, n); }); });
  connect(expert_parallel_, &QSpinBox::valueChanged, this,
          [this](int n) { edit([n](Settings& s) { apply_edits(s, {.expert_parallel = n}); }); });
  connect(sequence_parallel_, &QCheckBox::toggled, this,
          [this](bool on) { edit([on](Settings& s) { set_sequence_parallel(s, on); }); });
  connect(stage_, &QComboBox::currentIndexChanged, this,
          [this](int stage) { edit([stage](Settings& s) { set_stage(s, stage); }); });
  auto offload = [this] {
    const auto optimizer = OffloadDevice(offload_optimizer_->currentIndex());
    const auto param = OffloadDevice(offload_param_->currentIndex());
    edit([=](Settings& s) { set_offload(s, optimizer, param); });
  };
  connect(offload_optimizer_, &QComboBox::currentIndexChanged, this, offload);
  connect(offload_param_, &QComboBox::currentIndexChanged, this, offload);
  // Item 0 is DeepSpeed's ZeRO, items 1.. ColossalAI's placements in PlacementPolicy's order.
  connect(placement_, &QComboBox::currentIndexChanged, this, [this](int index) {
    edit([index](Settings& s) {
      if (index == 0) return set_placement(s, std::nullopt);
      set_placement(s, PlacementPolicy(index - 1));
    });
  });
  connect(shard_strategy_, &QComboBox::currentIndexChanged, this, [this](int index) {
    edit([index](Settings& s) { set_shard_strategy(s, ShardStrategy(index)); });
  });
  connect(delayed_update_, &QCheckBox::toggled, this,
          [this](bool on) { edit([on](Settings& s) { set_delayed_update(s, on); }); });
  connect(precision_, &QComboBox::currentIndexChanged, this,
          [this](int p) { edit([p](Settings& s) { set_precision(s, Precision(p)); }); });
  connect(micro_batch_, &QSpinBox::valueChanged, this,
          [this](int b) { edit([b](Settings& s) { set_micro_batch(s, b); }); });
  connect(seq_len_, &QSpinBox::valueChanged, this, [this](int n) {
    edit([n](Settings& s) {
      set_seq_len(s, n > 0 ? std::optional<std::int64_t>(n) : std::nullopt);
    });
  });
  connect(checkpointing_, &QCheckBox::toggled, this,
          [this](bool on) { edit([on](Settings& s) { set_checkpointing(s, on); }); });
  return form_widget;
}

void ConfigPanel::edit(const std::function<void(Settings&)>& change) {
  Settings settings = session_.settings();
  change(settings);
  session_.apply(std::move(settings));
}

bool ConfigPanel::load(const QString& what,
                       const std::function<void(Settings&, Diagnostics&)>& change) {
  Settings previous = session_.settings(), settings = previous;
  Diagnostics diagnostics;
  try {
    change(settings, diagnostics);
  } catch (const std::exception& error) {
    report_error_(QString("Cannot load the %1: %2").arg(what, error.what()));
    show_settings();
    return false;
  }
  if (!session_.apply(std::move(settings))) {
    const QString why = session_.error();
    session_.apply(std::move(previous));
    report_error_(QString("The %1 loads but cannot be planned: %2").arg(what, why));
    return false;
  }
  warnings_.clear();
  for (const auto& w : diagnostics.warnings) warnings_ << QString::fromStdString("warning: " + w);
  show_status();
  return true;
}

bool ConfigPanel::load_model_file(const QString& path) {
  return load("model",
              [p = path.toStdString()](Settings& s, Diagnostics& d) { load_model_spec(s, p, d); });
}

bool ConfigPanel::load_cluster_file(const QString& path) {
  return load("cluster", [p = path.toStdString()](Settings& s, Diagnostics& d) {
    load_cluster_spec(s, p, d);
  });
}

bool ConfigPanel::load_deepspeed_file(const QString& path) {
  return load("DeepSpeed config", [p = path.toStdString()](Settings& s, Diagnostics& d) {
    gui::load_deepspeed_file(s, p, d);
  });
}

void ConfigPanel::pick_model_file() {
  const QString path =
      QFileDialog::getOpenFileName(this, "Open a model", {}, "JSON (*.json);;All files (*)");
  if (!path.isEmpty()) load_model_file(path);
}

void ConfigPanel::pick_cluster_file() {
  const QString path =
      QFileDialog::getOpenFileName(this, "Open a cluster", {}, "JSON (*.json);;All files (*)");
  if (!path.isEmpty()) load_cluster_file(path);
}

void ConfigPanel::pick_deepspeed_file() {
  const QString path = QFileDialog::getOpenFileName(this, "Open a DeepSpeed config", {},
                                                    "JSON (*.json);;All files (*)");
  if (!path.isEmpty()) load_deepspeed_file(path);
}

void ConfigPanel::show_settings() {
  const Settings& s = session_.settings();
  const QSignalBlocker b1(model_), b2(cluster_), b3(gpus_), b4(stage_), b5(offload_optimizer_),
      b6(offload_param_), b7(precision_), b8(micro_batch_), b9(seq_len_), b10(checkpointing_),
      b11(tensor_parallel_), b12(sequence_parallel_), b13(pipeline_parallel_),
      b14(expert_parallel_), b15(placement_), b16(shard_strategy_), b17(delayed_update_);
  select_source(*model_, s.model_source);
  select_source(*cluster_, s.cluster_source);
  // The file's name, its whole path on hover: a long path must not widen the panel.
  const QString deepspeed = QString::fromStdString(s.deepspeed_source);
  deepspeed_->setText(deepspeed.isEmpty() ? "(none: DeepSpeed defaults)"
                                          : QFileInfo(deepspeed).fileName());
  deepspeed_->setToolTip(deepspeed.isEmpty()
                             ? "No DeepSpeed config: DeepSpeed's defaults and the controls below"
                             : deepspeed);
  gpus_->setValue(s.gpus);
  tensor_parallel_->setValue(s.config.tensor_parallel.size);
  pipeline_parallel_->setValue(s.config.pipeline.size);
  expert_parallel_->setValue(s.config.expert_parallel.size);
  expert_parallel_->setEnabled(s.model.shape && s.model.shape->moe);
  sequence_parallel_->setChecked(s.config.tensor_parallel.sequence_parallel);
  sequence_parallel_->setEnabled(s.config.tensor_parallel.active() ||
                                 s.config.tensor_parallel.sequence_parallel);
  const ZeroConfig& zero = s.config.zero;
  stage_->setCurrentIndex(zero.stage);
  offload_optimizer_->setCurrentIndex(int(zero.offload_optimizer.device));
  offload_optimizer_->setEnabled(zero.offload_allowed(OffloadKind::Optimizer));
  offload_param_->setCurrentIndex(int(zero.offload_param.device));
  offload_param_->setEnabled(zero.offload_allowed(OffloadKind::Param));
  const bool colossalai = s.config.is_colossalai();
  placement_->setCurrentIndex(colossalai ? 1 + int(s.config.colossalai.placement) : 0);
  placement_->setEnabled(!s.config.is_fsdp());
  shard_strategy_->setCurrentIndex(int(s.config.colossalai.shard_strategy));
  shard_strategy_->setEnabled(colossalai);
  if (colossalai) {  // the placement decides the offload
    offload_optimizer_->setEnabled(false);
    offload_param_->setEnabled(false);
  }
  delayed_update_->setChecked(zero.delay_param_update);
  delayed_update_->setEnabled(zero.delay_param_update ||
                              (!colossalai && (zero.stage == 1 || zero.stage == 2) &&
                               zero.offload_optimizer.device == OffloadDevice::Cpu));
  precision_->setCurrentIndex(int(s.config.precision.precision));
  micro_batch_->setValue(int(micro_batch_of(s)));
  seq_len_->setValue(int(s.config.seq_len.value_or(0)));
  seq_len_->setSpecialValueText(QString("model default (%1)").arg(s.model.default_seq_len));
  checkpointing_->setChecked(s.config.activation_checkpointing.enabled);
  show_status();
}

namespace {

// "h.0 .. h.11" (the planned stage's first and last layer).
std::string stage_layers(const Plan& plan) {
  const auto& layers = plan.pipeline_stages.at(std::size_t(plan.pipeline_stage)).model.layers;
  if (layers.empty()) return "none";
  return layers.front().name + " .. " + layers.back().name;
}

}  // namespace

void ConfigPanel::show_status() {
  const Planned* planned = session_.planned();
  if (!session_.error().isEmpty() || !planned) {
    status_->setStyleSheet("color: #b00020;");
    status_->setText("Cannot plan: " + session_.error() + "\nThe views show the last valid plan.");
    return;
  }
  const Plan& plan = planned->plan;
  QString text = QString("Planned in %1 ms.\n").arg(session_.plan_milliseconds(), 0, 'f', 1);
  const TensorParallelism& tp = plan.request.config.tensor_parallel;
  if (tp.active()) {
    text +=
        QString(
            "%1 ranks: tensor parallel %2%3 x data parallel %4; each rank holds %5 "
            "parameters.\n")
            .arg(std::int64_t(plan.schedule.context.dp_size) * tp.size)
            .arg(tp.size)
            .arg(tp.sequence_parallel ? " with sequence parallelism" : "")
            .arg(plan.schedule.context.dp_size)
            .arg(QString::fromStdString(format_count(double(plan.rank_model.parameter_count()))));
  }
  const PipelineParallelism& pp = plan.request.config.pipeline;
  if (pp.active()) {
    text +=
        QString(
            "Pipeline: %1 stages (%2%3); the views show stage %4, the one with the most GPU memory "
            "(layers %5).\n")
            .arg(pp.size)
            .arg(to_string(pp.schedule))
            .arg(pp.virtual_stages > 1 ? QString(", %1 chunks per stage").arg(pp.virtual_stages)
                                       : QString())
            .arg(plan.pipeline_stage)
            .arg(QString::fromStdString(stage_layers(plan)));
  }
  text += peak_words(plan, Device::Gpu, "GPU peak", "per rank");
  for (Device d : {Device::Cpu, Device::Nvme}) {
    if (plan.device(d).peak > 0)
      text += "\n" + peak_words(plan, d, d == Device::Cpu ? "CPU" : "NVMe", "per node");
  }
  status_->setStyleSheet(plan.fits() ? "color: #1b5e20;" : "color: #b00020;");
  status_->setText(text);
  QStringList notes = warnings_;
  for (const auto& note : plan.notes) notes << QString::fromStdString(note);
  if (session_.loaded()) {
    for (const auto& note : session_.loaded()->notes) notes << QString::fromStdString(note);
  }
  notes_->setText(notes.join("\n"));
}

}  // namespace zerolens::gui
