#pragma once
// What `zerolens run` and `zerolens validate` share: the flags of a training run and the plan the
// executor runs (the plan flags, adjusted to the device backend and the MPI ranks running).
#include <memory>
#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/plan_options.hpp"
#include "exec/backends.hpp"
#include "exec/run/training_run.hpp"

namespace zerolens::cli {

struct RunFlags {
  PlanOptions plan;
  exec::TrainingOptions training;
  int log_every = 1;
  std::string measured_trace;  // path of the measured trace, or empty
  std::string inject_fault;    // testing: "die:RANK:STEP" ends that rank abruptly after that step
  std::string device = "cpu";  // the backend, by name: exec::make_backend(device)
  std::string collective_timeout = "300";  // seconds a collective may make no progress (0: off)
};

// The plan flags with run-appropriate defaults (gpt2-tiny, sequence 64, micro-batch 4) plus
// --steps, --seed, --log-every and --measured-trace.
void add_run_options(CLI::App& command, RunFlags& flags);

// exec::make_backend; under mpirun its refusal (the same on every rank) is printed by rank 0 only:
// the other ranks throw QuietExit (cli/app.hpp).
std::unique_ptr<exec::Backend> make_run_backend(const std::string& device);

// The plan the executor runs: --gpus defaults to the number of MPI ranks; the model is planned
// without dropout (the executor has none); no CUDA context or allocator fragmentation (outside
// the ledger, or absent on the CPU) and the backend's own library workspace, unless given.
// Notes go to `diagnostics`, the backend's note to the plan. Everything the executor refuses of
// the flags and the plan (exec::check_runnable) is refused here, before anything is printed, and
// once per job: rank 0 throws the InputError, the other ranks QuietExit.
Plan make_run_plan(const RunFlags& flags, const exec::Backend& backend, Diagnostics& diagnostics);

// Runs the steps on the backend's communicator and model, printing a line per --log-every steps
// on rank 0. SIGINT/SIGTERM end the run cleanly: the steps unwind (the NVMe swap files and a
// partial checkpoint removed), rank 0 says so, and the process exits 130 (SIGINT) or 143
// (SIGTERM). A collective stuck for --collective-timeout seconds aborts the job
// (exec/comm/interrupt.hpp).
exec::TrainingResult run_steps(const Plan& plan, exec::Backend& backend, const RunFlags& flags,
                               std::ostream& out);

}  // namespace zerolens::cli
