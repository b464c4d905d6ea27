#include "gui/command_line.hpp"

#include <QCommandLineParser>
#include <algorithm>
#include <cstring>
#include <iterator>

namespace zerolens::gui {
namespace {

struct Flag {
  const char* name;
  const char* value;  // nullptr: a switch
  const char* help;
  const char* short_name = nullptr;  // as `zerolens plan` spells it (-m, -s, ...)
};

const Flag kFlags[] = {
    {"screenshot", "FILE", "Render offscreen to FILE (.png or .svg) and exit (no display needed)"},
    {"view", "VIEW", "ranks|timeline|memory|traffic|compare (default ranks)"},
    {"step", "N",
     "Step cursor on op N, numbered as the step bar numbers ops (1: the first; 0: before it)"},
    {"seed-step", "N",
     "Step cursor on the seed walkthrough's step N (1-27; a ZeRO-3 plan such as --walkthrough), "
     "its caption shown"},
    {"rank", "R", "Describe the step as rank R (a global rank: 0 to the GPUs - 1)"},
    {"size", "WxH", "Window size for --screenshot (default 1600x1000)"},
    {"show", "WHAT", "Rank view and memory chart: all|states-and-copies|model-states"},
    {"scale", "MODE", "Rank view and memory chart: capacity|peak"},
    {"walkthrough", nullptr,
     "The 4-GPU ZeRO-3 walkthrough (gpt2-tiny, every tensor partitioned, a reduce-scatter after "
     "each layer's backward)"},
    {"trace", "FILE", "Open a trace (zerolens trace -o, or a measured trace) and plan its run"},
    {"model", "SPEC", "Model preset, dense:<N>, or a JSON file (HF config.json or layer list)",
     "m"},
    {"hf-config", "FILE", "Hugging Face config.json (same as --model FILE)"},
    {"deepspeed-config", "FILE", "DeepSpeed config JSON; the flags below override it", "c"},
    {"cluster", "SPEC", "Cluster preset or JSON file"},
    {"gpus", "N", "Every rank: data parallel x tensor parallel (one per GPU)", "g"},
    {"gpus-per-node", "N", "GPUs per node (default: the cluster's)"},
    {"framework", "NAME", "deepspeed|fsdp2|fsdp1|colossalai (FSDP and ColossalAI plan stage 3)"},
    {"placement", "POLICY",
     "ColossalAI's tensor_placement_policy: cuda|cpu|auto (implies --framework colossalai)"},
    {"shard-strategy", "S", "ColossalAI: tensor|bucket-tensor"},
    {"delayed-param-update", "BOOL",
     "ZeRO-Offload's delayed parameter update (stage 1-2, --offload-optimizer cpu)"},
    {"reduce-dtype", "P", "FSDP reduce_dtype: fp32|fp16|bf16"},
    {"optimizer-kernel", "K", "Adam's GPU kernel: fused|foreach|for-loop (its step's temporaries)"},
    {"tp", "N",
     "Tensor-parallel ranks per group (tensor_parallel.autotp_size, Megatron's layout); ZeRO runs "
     "over the data-parallel group of --gpus / --tp ranks"},
    {"sp", "BOOL",
     "Sequence parallelism with --tp (true|false): norms, dropout and the residual stream split "
     "along the sequence"},
    {"pp", "N",
     "Pipeline stages (pipeline.stages; stage 0 or 1): the views show the stage with the most GPU "
     "memory"},
    {"virtual-stages", "N", "Model chunks per pipeline stage (interleaved 1F1B)"},
    {"pipeline-schedule", "NAME", "gpipe|1f1b|interleaved (default 1f1b)"},
    {"ep", "N",
     "Expert parallelism of a mixture-of-experts model (DeepSpeed MoE's ep_size; stage 0-2): the "
     "rank view frames the EP group at its all-to-alls"},
    {"hpz", "N", "ZeRO++ hpZ: secondary partition over groups of N ranks (stage 3; 1: off)"},
    {"quantized-weights", "BOOL", "ZeRO++ qwZ: int8 parameter all-gathers (stage 3)"},
    {"quantized-gradients", "BOOL", "ZeRO++ qgZ: int4 two-hop gradient all-to-all (stage 3)"},
    {"stage", "N", "ZeRO stage 0-3", "s"},
    {"offload-optimizer", "DEV", "none|cpu|nvme"},
    {"offload-param", "DEV", "none|cpu|nvme (stage 3)"},
    {"precision", "P", "fp32|fp16|bf16", "p"},
    {"micro-batch", "N", "train_micro_batch_size_per_gpu", "b"},
    {"grad-accum", "N", "gradient_accumulation_steps"},
    {"seq-len", "N", "Sequence length"},
    {"activation-checkpointing", "BOOL", "true|false"},
};

// What to show and how, not what to plan.
bool is_view_flag(const char* name) {
  for (const char* view : {"screenshot", "view", "step", "seed-step", "rank", "size", "show",
                           "scale", "walkthrough", "trace"}) {
    if (std::strcmp(name, view) == 0) return true;
  }
  return false;
}

std::int64_t integer(const QCommandLineParser& parser, const char* flag, std::int64_t min,
                     std::int64_t max) {
  bool ok = false;
  const QString text = parser.value(flag);
  const qlonglong value = text.toLongLong(&ok);
  const std::string where = std::string("--") + flag;
  if (!ok) throw InputError(where, "expected an integer, got '" + text.toStdString() + "'");
  if (value < min || value > max) {
    throw InputError(where,
                     "must be between " + std::to_string(min) + " and " + std::to_string(max));
  }
  return value;
}

bool boolean(const QCommandLineParser& parser, const char* flag) {
  const QString text = parser.value(flag).toLower();
  if (text == "true" || text == "1" || text == "on" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "off" || text == "no") return false;
  throw InputError(std::string("--") + flag,
                   "expected true or false, got '" + text.toStdString() + "'");
}

std::string text(const QCommandLineParser& parser, const char* flag) {
  return parser.value(flag).toStdString();
}

QSize parse_size(const std::string& value) {
  const auto x = value.find('x');
  bool ok_w = false, ok_h = false;
  const int w = QString::fromStdString(value.substr(0, x)).toInt(&ok_w);
  const int h =
      x == std::string::npos ? 0 : QString::fromStdString(value.substr(x + 1)).toInt(&ok_h);
  if (!ok_w || !ok_h || w < 320 || h < 240 || w > 8000 || h > 8000) {
    throw InputError("--size", "expected WxH between 320x240 and 8000x8000, got '" + value + "'");
  }
  return {w, h};
}

void apply_sources(const QCommandLineParser& p, Settings& s, Diagnostics& d) {
  if (p.isSet("model")) load_model_spec(s, text(p, "model"), d);
  if (p.isSet("hf-config")) load_model_spec(s, text(p, "hf-config"), d);
  if (p.isSet("cluster")) load_cluster_spec(s, text(p, "cluster"), d);
  if (p.isSet("deepspeed-config")) load_deepspeed_file(s, text(p, "deepspeed-config"), d);
}

// The config flags, as the panel's edits (one application: a stage given with an offload keeps
// it, a stage alone clears the offloads it does not allow).
ConfigOverrides config_edits(const QCommandLineParser& p) {
  ConfigOverrides edits;
  if (p.isSet("framework")) edits.framework = parse_framework(text(p, "framework"), "--framework");
  if (p.isSet("placement")) {
    edits.placement = parse_placement_policy(text(p, "placement"), "--placement");
    if (!edits.framework) edits.framework = Framework::ColossalAi;
  }
  if (p.isSet("shard-strategy"))
    edits.shard_strategy = parse_shard_strategy(text(p, "shard-strategy"), "--shard-strategy");
  if (p.isSet("delayed-param-update"))
    edits.delayed_param_update = boolean(p, "delayed-param-update");
  // ColossalAI's placement decides the offload: DeepSpeed's blocks clear unless given (then the
  // plan names the conflict).
  if (edits.framework == Framework::ColossalAi) {
    if (!p.isSet("offload-optimizer")) edits.offload_optimizer = OffloadDevice::None;
    if (!p.isSet("offload-param")) edits.offload_param = OffloadDevice::None;
  }
  if (p.isSet("reduce-dtype"))
    edits.reduce_dtype = parse_precision(text(p, "reduce-dtype"), "--reduce-dtype");
  if (p.isSet("optimizer-kernel"))
    edits.optimizer_kernel =
        parse_optimizer_kernel(text(p, "optimizer-kernel"), "--optimizer-kernel");
  if (p.isSet("stage")) edits.stage = int(integer(p, "stage", 0, 3));
  if (p.isSet("offload-optimizer"))
    edits.offload_optimizer =
        parse_offload_device(text(p, "offload-optimizer"), "--offload-optimizer");
  if (p.isSet("offload-param"))
    edits.offload_param = parse_offload_device(text(p, "offload-param"), "--offload-param");
  if (p.isSet("precision")) edits.precision = parse_precision(text(p, "precision"), "--precision");
  if (p.isSet("micro-batch")) edits.micro_batch = integer(p, "micro-batch", 1, 1 << 30);
  if (p.isSet("grad-accum")) edits.grad_accum = integer(p, "grad-accum", 1, 1 << 20);
  if (p.isSet("seq-len")) edits.seq_len = integer(p, "seq-len", 1, std::int64_t(1) << 24);
  if (p.isSet("activation-checkpointing"))
    edits.activation_checkpointing = boolean(p, "activation-checkpointing");
  if (p.isSet("tp")) edits.tensor_parallel = int(integer(p, "tp", 1, 4096));
  if (p.isSet("sp")) edits.sequence_parallel = boolean(p, "sp");
  if (p.isSet("pp")) edits.pipeline_parallel = int(integer(p, "pp", 1, 4096));
  if (p.isSet("virtual-stages")) edits.virtual_stages = int(integer(p, "virtual-stages", 1, 1024));
  if (p.isSet("pipeline-schedule"))
    edits.pipeline_schedule =
        parse_pipeline_schedule(text(p, "pipeline-schedule"), "--pipeline-schedule");
  if (p.isSet("ep")) edits.expert_parallel = int(integer(p, "ep", 1, 4096));
  if (p.isSet("hpz")) edits.hpz_partition_size = int(integer(p, "hpz", 1, 1 << 24));
  if (p.isSet("quantized-weights")) edits.quantized_weights = boolean(p, "quantized-weights");
  if (p.isSet("quantized-gradients")) edits.quantized_gradients = boolean(p, "quantized-gradients");
  return edits;
}

void apply_fields(const QCommandLineParser& p, Settings& s) {
  if (p.isSet("gpus")) s.gpus = int(integer(p, "gpus", 1, 10'000'000));
  if (p.isSet("gpus-per-node")) s.gpus_per_node = int(integer(p, "gpus-per-node", 1, 1024));
  apply_edits(s, config_edits(p));
  // As `zerolens plan`: the GPUs must split into tensor-parallel groups (a TP size from a DeepSpeed
  // file is checked here too, under the flag that sets the GPUs).
  const int model_parallel = s.config.model_parallel_size();
  if (model_parallel > 1 && s.gpus % model_parallel != 0) {
    const char* flag = p.isSet("gpus") ? "--gpus"
                       : p.isSet("pp") ? "--pp"
                       : p.isSet("tp") ? "--tp"
                                       : "--gpus";
    throw InputError(
        flag, std::to_string(s.gpus) + " GPUs do not split into model-parallel groups of " +
                  std::to_string(model_parallel) + " (--gpus must be a multiple of --tp x --pp)");
  }
}

void read_view_options(const QCommandLineParser& p, CommandLine& line) {
  if (p.isSet("view")) {
    const auto view = parse_view(text(p, "view"));
    if (!view)
      throw InputError("--view", "expected ranks, timeline, memory, traffic or compare, got '" +
                                     text(p, "view") + "'");
    line.view = *view;
  }
  if (p.isSet("show")) {
    const std::string show = text(p, "show");
    if (show == "all")
      line.show = ShowMemory::All;
    else if (show == "states-and-copies")
      line.show = ShowMemory::StatesAndCopies;
    else if (show == "model-states")
      line.show = ShowMemory::ModelStates;
    else
      throw InputError("--show",
                       "expected all, states-and-copies or model-states, got '" + show + "'");
  }
  if (p.isSet("scale")) {
    const std::string scale = text(p, "scale");
    if (scale != "capacity" && scale != "peak")
      throw InputError("--scale", "expected capacity or peak, got '" + scale + "'");
    line.scale = scale == "peak" ? ScaleMode::Peak : ScaleMode::Capacity;
  }
  if (p.isSet("step"))
    line.step = integer(p, "step", 0, std::numeric_limits<std::int32_t>::max()) - 1;
  if (p.isSet("seed-step")) {
    if (p.isSet("step"))
      throw InputError("--seed-step", "--step and --seed-step both place the cursor: give one");
    line.seed_step = int(integer(p, "seed-step", 1, kSeedStepCount));
  }
  if (p.isSet("rank"))
    line.rank = int(integer(p, "rank", 0, std::numeric_limits<std::int32_t>::max()));
  if (p.isSet("size")) line.size = parse_size(text(p, "size"));
  if (p.isSet("screenshot")) line.screenshot = text(p, "screenshot");
  if (p.isSet("trace")) line.trace = text(p, "trace");
}

void add_flags(QCommandLineParser& parser) {
  parser.addHelpOption();
  for (const Flag& flag : kFlags) {
    QStringList names{flag.name};
    if (flag.short_name) names.prepend(flag.short_name);
    parser.addOption(flag.value ? QCommandLineOption(names, flag.help, flag.value)
                                : QCommandLineOption(names, flag.help));
  }
}

}  // namespace

CommandLine parse_command_line(const QStringList& arguments) {
  QCommandLineParser parser;
  add_flags(parser);
  if (!parser.parse(arguments)) throw InputError("", parser.errorText().toStdString());
  if (!parser.positionalArguments().isEmpty()) {
    throw InputError(
        "", "unexpected argument '" + parser.positionalArguments().front().toStdString() + "'");
  }
  CommandLine line;
  read_view_options(parser, line);
  // The example opens without config options; with any, what is not given is the CLI's default
  // (as `zerolens plan` would plan the same flags), not the example's.
  const bool configured = std::any_of(std::begin(kFlags), std::end(kFlags), [&](const Flag& flag) {
    return !is_view_flag(flag.name) && parser.isSet(flag.name);
  });
  line.settings = parser.isSet("walkthrough") ? walkthrough_settings()
                  : configured                ? cli_default_settings()
                                              : default_settings();
  Diagnostics diagnostics;
  apply_sources(parser, line.settings, diagnostics);
  apply_fields(parser, line.settings);
  if (parser.isSet("model") || parser.isSet("hf-config") || parser.isSet("deepspeed-config"))
    line.settings.walkthrough = false;
  return line;
}

std::string usage() {
  QCommandLineParser parser;
  parser.setApplicationDescription(
      "zerolens-gui: the ZeRO-DP step visualizer and planner. Without config options it opens the "
      "GPT-2 1.5B example (8 x A100-40GB, ZeRO-3, optimizer on the CPU); with any, what is not "
      "given is `zerolens plan`'s default (gpt2-124m, dgx-a100-80gb, stage 0, fp32, micro-batch "
      "1).");
  add_flags(parser);
  // No application object exists yet when --help is answered: name the program here.
  return parser.helpText().replace("<executable_name>", "zerolens-gui").toStdString();
}

bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  }
  return false;
}

bool wants_screenshot(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--screenshot", 12) == 0) return true;
  }
  return false;
}

}  // namespace zerolens::gui
