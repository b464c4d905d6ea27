// `zerolens sweep`: every layout x ZeRO++ x stage x offload x micro-batch x
// activation-checkpointing combination at a fixed global batch, ranked by predicted throughput,
// with the Pareto front of step time against headroom and each layout's verdict; what does not fit
// is dropped.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/plan_options.hpp"
#include "cli/table.hpp"
#include "cli/timeline_options.hpp"
#include "cli/validators.hpp"
#include "sim/model/lora.hpp"
#include "sim/predict/sweep.hpp"
#include "sim/report/sweep_json.hpp"

namespace zerolens::cli {
namespace {

struct SweepCommand {
  PlanOptions options;
  TimelineFlags timeline;
  std::vector<int> stages;
  std::vector<std::string> optimizer_offloads, param_offloads, checkpointing;
  std::vector<std::int64_t> micro_batches;
  std::vector<int> tp_sizes, pp_sizes, virtual_stage_counts, ep_sizes;
  std::vector<std::string> sequence_parallel, zeropp;
  bool search_parallelism = false;
  int jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  int top = 10;
  bool all = false, json = false, csv = false, quiet = false, progress = false;
  std::string units = "GB", output;
};

std::vector<OffloadDevice> devices_of(const std::vector<std::string>& names, const std::string& flag) {
  std::vector<OffloadDevice> devices;
  for (const auto& name : names) devices.push_back(parse_offload_device(name, flag));
  return devices;
}

// A dimension may be fixed by the plan flag (--stage 3) or listed by the sweep flag (--stages 2,3).
template <typename Fixed, typename Listed>
void reject_both(const std::optional<Fixed>& fixed, const std::vector<Listed>& listed, const std::string& names) {
  if (fixed && !listed.empty()) throw InputError(names, "give one of the two: the first fixes the value, the second lists values to sweep");
}

std::vector<bool> switches_of(const std::vector<std::string>& values) {
  std::vector<bool> switches;
  for (const auto& value : values) switches.push_back(value == "on");
  return switches;
}

// The layouts: a fixed flag (--tp 8) or a list (--tp-sizes 1,2,4,8); --search-parallelism fills
// the lists neither gives.
void add_layout_space(const SweepCommand& c, const PlanRequest& base, SweepSpace& space) {
  const PlanOptions& o = c.options;
  reject_both(o.tensor_parallel, c.tp_sizes, "--tp/--tp-sizes");
  reject_both(o.pipeline_parallel, c.pp_sizes, "--pp/--pp-sizes");
  reject_both(o.virtual_stages, c.virtual_stage_counts, "--virtual-stages/--virtual-stage-counts");
  reject_both(o.sequence_parallel, c.sequence_parallel, "--sp/--sequence-parallel");
  reject_both(o.expert_parallel, c.ep_sizes, "--ep/--ep-sizes");
  const bool zeropp_flag = o.hpz_partition_size || o.quantized_weights || o.quantized_gradients;
  if (zeropp_flag && !c.zeropp.empty())
    throw InputError("--zeropp",
                     "give --hpz/--quantized-weights/--quantized-gradients or --zeropp, not both");
  space.tensor_parallel = c.tp_sizes;
  space.pipeline_parallel = c.pp_sizes;
  space.virtual_stages = c.virtual_stage_counts;
  space.expert_parallel = c.ep_sizes;
  space.sequence_parallel = switches_of(c.sequence_parallel);
  for (const auto& name : c.zeropp) space.zeropp.push_back(parse_zeropp(name, "--zeropp"));
  const bool layouts_listed =
      c.search_parallelism || !c.tp_sizes.empty() || !c.pp_sizes.empty() || !c.ep_sizes.empty();
  if (o.dp && layouts_listed)
    throw InputError("--dp",
                     "the layouts searched split --gpus themselves; give --gpus instead of --dp");
  if (!c.search_parallelism) return;
  if (o.tensor_parallel) space.tensor_parallel = {*o.tensor_parallel};
  if (o.pipeline_parallel) space.pipeline_parallel = {*o.pipeline_parallel};
  if (o.virtual_stages) space.virtual_stages = {*o.virtual_stages};
  if (o.sequence_parallel) space.sequence_parallel = {*o.sequence_parallel};
  if (o.expert_parallel) space.expert_parallel = {*o.expert_parallel};
  add_parallel_search(base, space);
}

SweepSpace space_of(const SweepCommand& c) {
  const PlanOptions& o = c.options;
  reject_both(o.stage, c.stages, "--stage/--stages");
  reject_both(o.offload_optimizer, c.optimizer_offloads, "--offload-optimizer/--optimizer-offloads");
  reject_both(o.offload_param, c.param_offloads, "--offload-param/--param-offloads");
  reject_both(o.micro_batch, c.micro_batches, "--micro-batch/--micro-batches");
  reject_both(o.activation_checkpointing, c.checkpointing, "--activation-checkpointing/--checkpointing");
  SweepSpace space;
  if (o.stage) space.stages = {*o.stage};
  if (!c.stages.empty()) space.stages = c.stages;
  if (o.offload_optimizer) space.optimizer_devices = {*o.offload_optimizer};
  if (!c.optimizer_offloads.empty()) space.optimizer_devices = devices_of(c.optimizer_offloads, "--optimizer-offloads");
  if (o.offload_param) space.param_devices = {*o.offload_param};
  if (!c.param_offloads.empty()) space.param_devices = devices_of(c.param_offloads, "--param-offloads");
  if (o.micro_batch) space.micro_batches = {*o.micro_batch};
  if (!c.micro_batches.empty()) space.micro_batches = c.micro_batches;
  if (o.activation_checkpointing) space.checkpointing = {*o.activation_checkpointing};
  if (!c.checkpointing.empty()) {
    space.checkpointing.clear();
    for (const auto& value : c.checkpointing) space.checkpointing.push_back(value == "on");
  }
  space.prune =
      !c.all;  // --all lists every point, the larger micro-batches of one that overflows too
  space.threads = c.jobs;
  return space;
}

// The base request; without any batch size given, kDefaultBatchPerRank samples per GPU.
PlanRequest base_request(const SweepCommand& c, std::vector<std::string>& notes) {
  Diagnostics diagnostics;
  PlanRequest request = make_plan_request(c.options, diagnostics);
  print_warnings(diagnostics);
  if (const std::string note = default_sweep_batch(c.options, request); !note.empty())
    notes.push_back(note);
  return request;
}

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void update(std::int64_t done, std::int64_t total) {
    if (!enabled_) return;
    const int width = 40, filled = int(done * width / total);
    if (filled == last_filled_ && done != total) return;  // redraw only when the bar moves
    last_filled_ = filled;
    std::cerr << "\r[" << std::string(std::size_t(filled), '#') << std::string(std::size_t(width - filled), '.')
              << "] " << done << '/' << total << " configurations" << (done == total ? "\n" : "") << std::flush;
  }

 private:
  bool enabled_;
  int last_filled_ = -1;
};

std::string fixed(double value, int decimals) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(decimals) << value;
  return text.str();
}

// Which columns the tables show: a layout column when the search spans layouts (or any is model
// parallel), a ZeRO++ column when it is swept.
struct Columns {
  bool layout = false, zeropp = false;
};

Columns columns_of(const SweepReport& report) {
  Columns columns;
  for (const auto& result : report.results) {
    const ParallelLayout& layout = result.point.layout;
    columns.layout |=
        report.families.size() > 1 || layout.tensor > 1 || layout.pipeline > 1 || layout.expert > 1;
    columns.zeropp |= result.point.zeropp.has_value();
  }
  return columns;
}

std::vector<std::string> result_header(const Columns& columns) {
  std::vector<std::string> header{"#"};
  if (columns.layout) header.push_back("layout");
  if (columns.zeropp) header.push_back("zero++");
  for (const char* name :
       {"stage", "opt", "param", "micro", "accum", "ckpt", "step ms", "tokens/s", "TFLOP/s/GPU",
        "MFU %", "GPU peak", "CPU/node", "NVMe/node", "headroom %", "exposed comm ms"})
    header.emplace_back(name);
  return header;
}

std::vector<std::string> result_row(std::int64_t rank, const SweepResult& r, SizeUnit unit,
                                    const Columns& columns) {
  const SweepPoint& p = r.point;
  const auto bytes = [&](Device d) {
    return r.peak[std::size_t(d)] == 0 ? std::string("-") : format_bytes(r.peak[std::size_t(d)], unit, 1);
  };
  std::vector<std::string> row{rank > 0 ? std::to_string(rank) : "-"};
  if (columns.layout) row.push_back(p.layout.label());
  if (columns.zeropp) row.push_back(p.zeropp ? to_string(*p.zeropp) : "-");
  const std::vector<std::string> rest{ZeroStage{p.stage}.name(),
                                      to_string(p.optimizer),
                                      to_string(p.param),
                                      std::to_string(p.micro_batch),
                                      std::to_string(p.grad_accumulation),
                                      p.checkpointing ? "on" : "off",
                                      r.fits ? fixed(r.step_time * 1e3, 1) : "-",
                                      r.fits ? fixed(r.tokens_per_second, 0) : "-",
                                      r.fits ? fixed(r.model_flops_per_gpu / 1e12, 1) : "-",
                                      r.fits ? fixed(r.mfu * 100, 1) : "-",
                                      bytes(Device::Gpu),
                                      bytes(Device::Cpu),
                                      bytes(Device::Nvme),
                                      fixed(r.headroom * 100, 1),
                                      r.fits ? fixed(r.exposed_communication * 1e3, 1) : "-"};
  row.insert(row.end(), rest.begin(), rest.end());
  return row;
}

std::string layout_summary(const SweepReport& report, const PlanRequest& base) {
  if (report.families.size() > 1)
    return ", " + std::to_string(report.families.size()) + " layouts searched";
  const TensorParallelism& tp = base.config.tensor_parallel;
  const PipelineParallelism& pp = base.config.pipeline;
  if (!tp.active() && !pp.active()) return {};
  return ", " + report.families.front().layout.label();
}

void print_header(std::ostream& out, const SweepReport& report, const PlanRequest& base,
                  const SweepCommand& c, double seconds) {
  const std::int64_t threads =
      std::min<std::int64_t>(c.jobs, std::max<std::int64_t>(report.enumerated, 1));
  const Cluster& cluster = base.cluster;
  out << "zerolens sweep: " << base.model.name << " ("
      << format_count(double(base.model.parameter_count())) << " parameters) on "
      << std::int64_t(base.dp_size) * base.config.tensor_parallel.size * base.config.pipeline.size
      << " x " << cluster.gpu.name << " (" << cluster.name << ")" << layout_summary(report, base)
      << ", " << to_string(base.config.precision.precision) << ", global batch "
      << report.train_batch_size;
  if (report.families.size() == 1)
    out << " (" << report.batch_per_rank << " per data-parallel rank)";
  if (const std::string lora = lora_summary(base.model); !lora.empty()) out << '\n' << lora;
  out << '\n'
      << report.evaluated << " configurations evaluated in " << fixed(seconds, 2) << " s ("
      << threads << (threads > 1 ? " threads" : " thread") << ")";
  if (report.pruned > 0)
    out << ", " << report.pruned
        << " skipped (a smaller micro-batch already overflows; --all evaluates them)";
  if (report.refused > 0) out << ", " << report.refused << " refused by the planner";
  out << "; " << report.fitting << " fit.\n";
}

void print_top(std::ostream& out, const SweepReport& report, const SweepCommand& c, SizeUnit unit,
               const Columns& columns) {
  Table table(result_header(columns));
  std::int64_t rank = 0, shown = 0;
  for (const auto& result : report.results) {
    if (result.fits) ++rank;
    if (!result.fits && !c.all) break;
    if (c.top > 0 && shown == c.top) break;
    table.add_row(result_row(result.fits ? rank : 0, result, unit, columns));
    ++shown;
  }
  if (report.fitting == 0) out << "\nNothing fits; --all --top 0 lists every configuration with its peaks.\n";
  else out << "\nTop " << std::min<std::int64_t>(shown, report.fitting) << " by predicted throughput (tokens/s of the whole group):\n";
  if (shown > 0) table.print(out);
}

void print_front(std::ostream& out, const SweepReport& report, SizeUnit unit,
                 const Columns& columns) {
  Table table(result_header(columns));
  std::int64_t rank = 0, shown = 0;
  for (const auto& result : report.results) {
    if (!result.fits) break;
    ++rank;
    if (!result.pareto) continue;
    table.add_row(result_row(rank, result, unit, columns));
    ++shown;
  }
  if (shown == 0) return;
  out << "\nPareto front, step time against headroom (the smallest free share of a device used); # "
         "is the "
         "throughput rank:\n";
  table.print(out);
}

void print_families(std::ostream& out, const SweepReport& report) {
  if (report.families.size() < 2) return;
  Table table({"layout", "points", "evaluated", "fit", "skipped", "refused", "verdict"});
  table.align_last_left();
  // On the front first, then dominated, then what does not fit, then what was refused.
  std::vector<SweepFamily> families = report.families;
  std::stable_sort(families.begin(), families.end(),
                   [](const SweepFamily& a, const SweepFamily& b) { return a.fate < b.fate; });
  for (const auto& family : families)
    table.add_row({family.layout.label(), std::to_string(family.enumerated),
                   std::to_string(family.evaluated), std::to_string(family.fitting),
                   std::to_string(family.pruned), std::to_string(family.refused), family.verdict});
  out << "\nLayouts (tensor x pipeline x data parallel over the same GPUs):\n";
  table.print(out);
}

void print_sweep(std::ostream& out, const SweepReport& report, const SweepCommand& c,
                 SizeUnit unit) {
  const Columns columns = columns_of(report);
  print_top(out, report, c, unit, columns);
  print_front(out, report, unit, columns);
  print_families(out, report);
  for (const auto& note : report.notes) out << "note: " << note << '\n';
}

void print_sweep_csv(std::ostream& out, const SweepReport& report) {
  out << "rank,tensor_parallel,sequence_parallel,pipeline_parallel,virtual_stages,data_parallel,"
         "zeropp,stage,"
         "offload_optimizer,offload_param,micro_batch,grad_accumulation,activation_checkpointing,"
         "fits,pareto,"
         "headroom,step_time_s,tokens_per_s,model_flops_per_gpu,mfu,gpu_peak_bytes,cpu_peak_bytes,"
         "nvme_peak_bytes,"
         "exposed_communication_s,expert_parallel\n";
  std::int64_t rank = 0;
  for (const auto& r : report.results) {
    const SweepPoint& p = r.point;
    const ParallelLayout& l = p.layout;
    out << (r.fits ? std::to_string(++rank) : "") << ',' << l.tensor << ','
        << int(l.sequence_parallel) << ',' << l.pipeline << ',' << l.virtual_stages << ',' << l.data
        << ',' << (p.zeropp ? to_string(*p.zeropp) : "") << ',' << p.stage << ','
        << to_string(p.optimizer) << ',' << to_string(p.param) << ',' << p.micro_batch << ','
        << p.grad_accumulation << ',' << int(p.checkpointing) << ',' << int(r.fits) << ','
        << int(r.pareto) << ',' << std::setprecision(9) << r.headroom << ',' << r.step_time << ','
        << r.tokens_per_second << ',' << r.model_flops_per_gpu << ',' << r.mfu << ',' << r.peak[0]
        << ',' << r.peak[1] << ',' << r.peak[2] << ',' << r.exposed_communication << ',' << l.expert
        << '\n';
  }
}

int run_sweep_command(const SweepCommand& c) {
  if (c.json && c.csv) throw InputError("--json/--csv", "choose one output format");
  const SizeUnit unit = parse_size_unit(c.units);
  SweepSpace space = space_of(c);
  std::vector<std::string> notes;
  const PlanRequest base = base_request(c, notes);
  add_layout_space(c, base, space);
  ProgressBar bar(!c.quiet && (c.progress || isatty(STDERR_FILENO)));
  const auto start = std::chrono::steady_clock::now();
  SweepReport report = run_sweep(base, space, c.timeline.options(),
                                 [&bar](std::int64_t done, std::int64_t total) { bar.update(done, total); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.notes.insert(report.notes.begin(), notes.begin(), notes.end());
  Output output(c.output);
  std::ostream& out = output.stream();
  if (c.json) {
    out << sweep_to_json(report, base).dump(2) << '\n';
  } else if (c.csv) {
    print_sweep_csv(out, report);
  } else {
    print_header(out, report, base, c, seconds);
    print_sweep(out, report, c, unit);
  }
  return report.fitting > 0 ? kExitOk : kExitCheckFailed;
}

}  // namespace

void register_sweep_command(CLI::App& app, CommandRegistry& registry) {
  auto c = std::make_shared<SweepCommand>();
  CLI::App* sweep = app.add_subcommand("sweep",
                                       "Rank every stage x offload x micro-batch x checkpointing "
                                       "choice (and, asked, every TP x PP x DP layout and "
                                       "ZeRO++ variant) that fits by predicted throughput, with "
                                       "the Pareto front of step time against headroom");
  sweep->footer(
      "Every planning flag sets the base configuration. --stage, --offload-optimizer, "
      "--offload-param,\n"
      "--micro-batch and --activation-checkpointing fix their dimension; the list flags choose "
      "what is swept.\n"
      "The global batch and the GPUs stay fixed (gradient accumulation follows the micro-batch, "
      "data\n"
      "parallelism the layout). Larger micro-batches of a configuration that does not fit are "
      "skipped\n"
      "(--all evaluates and lists them). Exit status 1 when no configuration fits.");
  add_plan_options(*sweep, c->options);
  auto* dims = "Sweep";
  sweep->add_option("--stages", c->stages, "ZeRO stages to sweep (default 0,1,2,3)")
      ->delimiter(',')
      ->check(integer_in(0, 3))
      ->group(dims);
  sweep->add_option("--optimizer-offloads", c->optimizer_offloads, "Optimizer offload devices (default none,cpu,nvme)")
      ->delimiter(',')->check(CLI::IsMember({"none", "cpu", "nvme"}))->group(dims);
  sweep->add_option("--param-offloads", c->param_offloads, "Parameter offload devices (default none,cpu,nvme)")
      ->delimiter(',')->check(CLI::IsMember({"none", "cpu", "nvme"}))->group(dims);
  sweep
      ->add_option("--micro-batches", c->micro_batches,
                   "Micro-batch sizes (default: powers of two dividing the batch per GPU)")
      ->delimiter(',')
      ->check(positive_integer())
      ->group(dims);
  sweep->add_option("--checkpointing", c->checkpointing, "Activation checkpointing: on, off or on,off (default)")
      ->delimiter(',')->check(CLI::IsMember({"on", "off"}))->group(dims);
  auto* layouts = "Parallel layouts (over the same --gpus)";
  sweep
      ->add_flag("--search-parallelism", c->search_parallelism,
                 "Search every layout of the GPUs: TP in powers of two up to a node, PP over the "
                 "divisors of the "
                 "block count, virtual stages 1 and 2, SP off and on, ZeRO++ off and all, for a "
                 "MoE model every EP size dividing its experts (a fixed "
                 "--tp, --pp, ... "
                 "or a list flag narrows its dimension)")
      ->group(layouts);
  sweep->add_option("--tp-sizes", c->tp_sizes, "Tensor-parallel sizes to sweep (e.g. 1,2,4,8)")
      ->delimiter(',')
      ->check(integer_in(1, 4096))
      ->group(layouts);
  sweep->add_option("--pp-sizes", c->pp_sizes, "Pipeline stage counts to sweep (e.g. 1,2,4)")
      ->delimiter(',')
      ->check(integer_in(1, 4096))
      ->group(layouts);
  sweep
      ->add_option("--ep-sizes", c->ep_sizes,
                   "Expert-parallel sizes of a mixture-of-experts model to sweep (e.g. 1,2,4,8; "
                   "each must divide the layout's data-parallel ranks)")
      ->delimiter(',')
      ->check(integer_in(1, 4096))
      ->group(layouts);
  sweep
      ->add_option("--virtual-stage-counts", c->virtual_stage_counts,
                   "Model chunks per pipeline stage to sweep (interleaved 1F1B above 1)")
      ->delimiter(',')
      ->check(integer_in(1, 1024))
      ->group(layouts);
  sweep
      ->add_option("--sequence-parallel", c->sequence_parallel,
                   "Sequence parallelism with TP: on, off or on,off")
      ->delimiter(',')
      ->check(CLI::IsMember({"on", "off"}))
      ->group(layouts);
  sweep
      ->add_option("--zeropp", c->zeropp,
                   "ZeRO++ variants at stage 3 without TP/PP: off, hpz (over a node), qwz, qgz, "
                   "all (e.g. off,all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "hpz", "qwz", "qgz", "all"}))
      ->group(layouts);
  sweep
      ->add_option("-j,--jobs", c->jobs,
                   "Threads evaluating configurations (default: the machine's cores)")
      ->check(integer_in(1, 1024))
      ->capture_default_str()
      ->group(layouts);
  auto* out = "Timeline and output";
  add_timeline_options(*sweep, c->timeline, out);
  sweep->add_option("--top", c->top, "Rows to show (0: all)")
      ->check(non_negative_integer())
      ->capture_default_str()
      ->group(out);
  sweep->add_flag("--all", c->all, "Also show the configurations that do not fit (after the ranked ones)")->group(out);
  sweep->add_flag("--json", c->json, "Versioned JSON (schema zerolens.sweep, docs/sweep.md), every result")->group(out);
  sweep->add_flag("--csv", c->csv, "CSV, every result")->group(out);
  sweep->add_option("--units", c->units, "Units of sizes: GB or GiB")
      ->check(CLI::IsMember({"GB", "GiB", "gb", "gib"}))->capture_default_str()->group(out);
  sweep->add_flag("--progress", c->progress, "Show the progress bar even when stderr is not a terminal")->group(out);
  sweep->add_flag("-q,--quiet", c->quiet, "No progress bar")->group(out);
  sweep->add_option("-o,--output", c->output, "Write to a file instead of standard output")->group(out);
  registry.add(sweep, [c] { return run_sweep_command(*c); });
}

}  // namespace zerolens::cli
