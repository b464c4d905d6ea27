#include "cli/run_support.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <ostream>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "exec/comm/interrupt.hpp"
#include "sim/core/error.hpp"
#include "sim/core/units.hpp"

namespace zerolens::cli {
namespace {

constexpr double kRunReduceBucket = 5e5;  // elements

}  // namespace

void add_run_options(CLI::App& command, RunFlags& flags) {
  flags.plan.model = "gpt2-tiny";
  flags.plan.seq_len = 64;
  flags.plan.micro_batch = 4;
  add_plan_options(command, flags.plan);
  // What the executor does not run stays parsed, for the refusal that names it, but out of --help.
  for (const char* name :
       {"--framework", "--reshard-after-forward", "--reduce-dtype", "--cpu-checkpointing",
        "--dropout", "--ep", "--capacity-factor", "--min-capacity", "--lora-rank", "--lora-targets",
        "--quantize-base", "--lora-dropout", "--target-seq-len"})
    command.get_option(name)->group("");
  command.footer(
      "Flags of parallelism and frameworks the executor does not run (expert parallelism, FSDP, "
      "CPU checkpointing, dropout, LoRA) are refused by name and not listed here; `zerolens plan "
      "--help` lists every planning flag. --tp, --sp, --pp and --virtual-stages run on --device "
      "cpu: mpirun -np (DP x TP x PP) ranks; so do, at stage 3 over data parallelism alone, "
      "--shard-group, --hpz and ZeRO++'s --quantized-weights and --quantized-gradients "
      "(--gpus-per-node sets the nodes qgZ's hops see).");
  const char* group = "Training run";
  command.add_option("--steps", flags.training.steps, "Optimizer steps to run")
      ->capture_default_str()
      ->check(integer_in(1, 1000000))
      ->group(group);
  command
      .add_option("--seed", flags.training.seed,
                  "Seed of the synthetic data and the initial weights")
      ->capture_default_str()
      ->group(group);
  command.add_option("--log-every", flags.log_every, "Print every N-th step (0: none)")
      ->capture_default_str()
      ->check(integer_in(0, 1000000))
      ->group(group);
  command
      .add_option("--measured-trace", flags.measured_trace,
                  "Write the last step as measured in the shared trace schema (traces/README.md); "
                  "run: {rank} in the path makes every rank write its own ops")
      ->group(group);
  command
      .add_option("--save", flags.training.save_directory,
                  "Save ZeRO checkpoints here (each rank its partition; see docs/executor.md)")
      ->group(group);
  command
      .add_option("--save-every", flags.training.save_every,
                  "Steps between checkpoints (0: after the last step)")
      ->capture_default_str()
      ->check(integer_in(0, 1000000))
      ->group(group);
  command
      .add_option("--resume", flags.training.resume_from,
                  "Resume from a checkpoint directory (saved by any number of ranks; --steps "
                  "counts from step 0)")
      ->group(group);
  command
      .add_option(
          "--device", flags.device,
          "Where to train: cpu (the CPU backend, MPI) or cuda (each rank's GPU, NCCL; CUDA builds)")
      ->capture_default_str()
      ->check(CLI::IsMember(exec::backend_names()))
      ->group(group);
  command
      .add_option("--collective-timeout", flags.collective_timeout,
                  "Seconds a collective may make no progress before the job is aborted with a "
                  "message naming "
                  "the rank and the collective (a peer stopped or dead; 0: wait forever)")
      ->capture_default_str()
      ->group(group);
  command
      .add_option("--inject-fault", flags.inject_fault,
                  "Testing: die:RANK:STEP makes that rank exit abruptly after that step (the "
                  "others must stop)")
      ->group(group);
}

namespace {

Plan plan_for_run(const RunFlags& flags, const exec::Backend& backend, Diagnostics& diagnostics) {
  PlanOptions options = flags.plan;
  // The ranks mpirun started are the job's: DP x TP x PP of them.
  const bool ranks_given = options.gpus || options.dp;
  if (!ranks_given) options.gpus = backend.communicator().size();
  if (!options.cuda_context_gib) options.cuda_context_gib = 0;
  if (!options.workspace_gib)
    options.workspace_gib = double(backend.library_workspace_bytes()) / double(kBytesPerGiB);
  if (!options.fragmentation) options.fragmentation = 0;
  // DeepSpeed allocates whole reduce buckets (5e8 elements by default: 2 GB in fp32) however small
  // the model; without a config file, run-sized buckets keep a laptop run small.
  if (!options.deepspeed_config && !options.reduce_bucket_size)
    options.reduce_bucket_size = kRunReduceBucket;
  PlanRequest request = [&] {
    try {
      return make_plan_request(options, diagnostics);
    } catch (const InputError& error) {
      if (ranks_given || error.where() != "--gpus") throw;
      throw InputError("--tp", std::to_string(*options.gpus) +
                                   " processes are running; start a multiple of --tp x --pp "
                                   "of them (mpirun -np; each data-parallel rank is a TP group "
                                   "on every pipeline stage)");
    }
  }();
  if (request.config.is_fsdp()) {
    throw InputError("--framework", std::string("the executor runs DeepSpeed's ZeRO, not ") +
                                        to_string(request.config.framework) +
                                        "; plan FSDP with `zerolens plan --framework`");
  }
  const ZeroConfig& z = request.config.zero;
  const bool hybrid = z.shard_group_size > 0 && z.shard_group_size < request.dp_size;
  const bool quantized = z.stage == 3 && (z.quantized_weights || z.quantized_gradients);
  if ((hybrid || z.hpz_partition_size > 1) && flags.device != "cpu") {
    throw InputError(hybrid ? "--shard-group" : "--hpz",
                     "hybrid sharding and hpZ run on --device cpu (their groups are split off "
                     "MPI's communicator)");
  }
  if (quantized && flags.device != "cpu") {
    throw InputError(z.quantized_weights ? "--quantized-weights" : "--quantized-gradients",
                     "ZeRO++'s quantized collectives run on --device cpu (the " + flags.device +
                         " engine does not call the GPU quantization kernels yet)");
  }
  const bool tp = request.config.tensor_parallel.active(), pp = request.config.pipeline.active();
  if (request.config.expert_parallel.active() && flags.device != "cpu") {
    throw InputError("--ep", "expert parallelism runs on --device cpu (the " + flags.device +
                                 " backend's GPT-2 has no mixture-of-experts block)");
  }
  if ((tp || pp) && flags.device != "cpu") {
    throw InputError(tp ? "--tp" : "--pp",
                     std::string(tp ? "tensor" : "pipeline") +
                         " parallelism runs on --device cpu "
                         "(the " +
                         flags.device + " backend's GPT-2 has no " +
                         (tp ? "tensor-parallel layer steps" : "pipeline sends and receives") +
                         " yet)");
  }
  // The executor's Adam is one fused kernel (kernels/optimizer): it builds none of torch.optim's
  // temporaries, so the plan it is held to leaves them out.
  std::string kernel_note;
  if (request.config.effective_optimizer_kernel() != OptimizerKernel::Fused) {
    kernel_note = std::string("the executor runs a fused Adam: the ") +
                  to_string(request.config.effective_optimizer_kernel()) +
                  " kernel's temporaries (optimizer.params.torch_adam, --optimizer-kernel) are "
                  "planned by `zerolens plan`, not run or held here";
    request.config.optimizer.kernel = OptimizerKernel::Fused;
  }
  // A calibrated cluster's gpus_per_node is the ranks calibrate ran; a run's node holds the ranks
  // started on this host (which share its cores: sim/timeline/cpu_ranks.hpp).
  if (request.cluster.calibration && !options.gpus_per_node) {
    request.cluster = with_ranks(request.cluster, backend.communicator().size(),
                                 backend.communicator().ranks_on_node());
  }
  if (request.model.shape && request.model.shape->dropout > 0) {
    TransformerShape shape = *request.model.shape;
    shape.dropout = 0;
    const std::string source = request.model.source;
    request.model = build_transformer(request.model.name, shape);
    request.model.source = source;
  }
  Plan plan = make_plan(std::move(request));
  plan.notes.push_back(backend.plan_note());
  if (!kernel_note.empty()) plan.notes.push_back(kernel_note);
  // Whatever the executor refuses of this plan, refused before the header and the step table.
  exec::check_runnable(plan, flags.training, backend.communicator().size());
  return plan;
}

}  // namespace

std::unique_ptr<exec::Backend> make_run_backend(const std::string& device) {
  try {
    return exec::make_backend(device);
  } catch (const InputError&) {
    if (launcher_rank() > 0) throw QuietExit{};  // refused alike on every rank (backends.hpp)
    throw;
  }
}

Plan make_run_plan(const RunFlags& flags, const exec::Backend& backend, Diagnostics& diagnostics) {
  try {
    return plan_for_run(flags, backend, diagnostics);
  } catch (const InputError&) {
    // The flags and the plan are the same on every rank: the first rank prints the refusal.
    if (backend.communicator().rank() > 0) throw QuietExit{};
    throw;
  }
}

namespace {

struct Fault {
  int rank = -1;
  std::int64_t step = -1;
};

Fault parse_fault(const std::string& text) {
  if (text.empty()) return {};
  Fault fault;
  char tail = 0;
  long long step = 0;
  if (std::sscanf(text.c_str(), "die:%d:%lld%c", &fault.rank, &step, &tail) != 2 ||
      fault.rank < 0 || step < 1) {
    throw InputError("--inject-fault",
                     "'" + text + "' is not die:RANK:STEP (RANK >= 0, STEP >= 1)");
  }
  fault.step = step;
  return fault;
}

double parse_collective_timeout(const std::string& text) {
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(seconds) || seconds < 0) {
    throw InputError("--collective-timeout",
                     "'" + text + "' is not a number of seconds >= 0 (0: no timeout)");
  }
  return seconds;
}

exec::TrainingResult train_steps(const Plan& plan, exec::Communicator& comm,
                                 const exec::TrainingOptions& training, const RunFlags& flags,
                                 const Fault& fault, bool speak, bool fp16, std::ostream& out);

}  // namespace

exec::TrainingResult run_steps(const Plan& plan, exec::Backend& backend, const RunFlags& flags,
                               std::ostream& out) {
  exec::Communicator& comm = backend.communicator();
  exec::TrainingOptions training = flags.training;
  training.make_model = backend.model_factory();
  // One rank prints the run, the one whose measurement is reported (exec::recording_rank).
  const bool speak = comm.rank() == exec::recording_rank(plan) && flags.log_every > 0;
  const Fault fault = parse_fault(flags.inject_fault);
  const bool fp16 = plan.request.config.precision.precision == Precision::Fp16;
  if (speak)
    out << "  step        loss   grad norm    time (ms)" << (fp16 ? "   loss scale" : "") << '\n';
  exec::set_collective_timeout(parse_collective_timeout(flags.collective_timeout));
  exec::install_interrupt_handlers();
  try {
    return train_steps(plan, comm, training, flags, fault, speak, fp16, out);
  } catch (const exec::Interrupted& interrupted) {
    // The engine and a partial checkpoint are gone (unwound); MPI is left unfinalised, since
    // peers may be anywhere in a collective or dead.
    if (comm.rank() == 0) {
      out << std::flush;
      std::fprintf(stderr, "zerolens run: interrupted by %s at step %lld; swap files removed\n",
                   exec::signal_name(interrupted.signal()).c_str(),
                   static_cast<long long>(exec::current_step() + 1));
    }
    std::fflush(stderr);
    std::_Exit(128 + interrupted.signal());
  }
}

namespace {

exec::TrainingResult train_steps(const Plan& plan, exec::Communicator& comm,
                                 const exec::TrainingOptions& training, const RunFlags& flags,
                                 const Fault& fault, bool speak, bool fp16, std::ostream& out) {
  return exec::train_gpt2(plan, comm, training, [&](const exec::StepRecord& s) {
    if (comm.rank() == fault.rank && s.step + 1 == fault.step) {
      std::fprintf(stderr, "zerolens: injected fault: rank %d exits after step %lld\n", fault.rank,
                   (long long)fault.step);
      std::_Exit(kExitInternal);
    }
    const bool last = s.step + 1 == flags.training.steps;
    if (!speak || ((s.step + 1) % flags.log_every != 0 && !last && s.step != 0)) return;
    out << std::setw(6) << s.step + 1 << std::fixed << std::setprecision(4) << std::setw(12)
        << s.loss << std::setw(12) << s.grad_norm << std::setprecision(2) << std::setw(13)
        << s.seconds * 1e3 << std::defaultfloat;
    if (fp16)
      out << std::fixed << std::setprecision(0) << std::setw(13) << s.loss_scale
          << std::defaultfloat << (s.skipped ? "  overflow: step skipped" : "");
    out << '\n' << std::flush;
  });
}

}  // namespace

}  // namespace zerolens::cli
