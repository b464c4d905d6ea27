#pragma once
// What `zerolens run` and `zerolens validate` share: the flags of a training run and the plan the
// executor runs (the plan flags, adjusted to the device backend and the MPI ranks running).
#include <memory>
#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/plan_options.hpp"
#include "exec/communicator.hpp"
#include "exec/training_run.hpp"

namespace zerolens::cli {

struct RunFlags {
  PlanOptions plan;
  exec::TrainingOptions training;
  int log_every = 1;
  std::string measured_trace;  // path of the measured trace, or empty
  std::string inject_fault;    // testing: "die:RANK:STEP" ends that rank abruptly after that step
  std::string device = "cpu";  // the device backend: cpu, or cuda (each rank's GPU)
  std::string backend = "CPU device backend, MPI collectives";  // what runs, for the header
};

// The plan flags with run-appropriate defaults (gpt2-tiny, sequence 64, micro-batch 4) plus
// --steps, --seed, --log-every and --measured-trace.
void add_run_options(CLI::App& command, RunFlags& flags);

// The plan the executor runs: --gpus defaults to the number of MPI ranks; the model is planned
// without dropout (the executor has none); the CPU backend has no CUDA context, library
// workspaces or caching allocator, so those default to 0 unless given. Notes go to `diagnostics`.
Plan make_run_plan(const RunFlags& flags, const exec::Communicator& comm, Diagnostics& diagnostics);

// MPI_COMM_WORLD, created once per process.
exec::Communicator& world_communicator();

// The communicator of --device (cpu: MPI_COMM_WORLD; cuda: NCCL over each rank's GPU, or MPI on
// host-staged copies where ranks share one), created once; for cuda it also sets the CUDA GPT-2
// model and the backend's description in `flags`. Throws InputError naming --device when the build
// has no CUDA or a rank has no GPU (on every rank).
exec::Communicator& run_communicator(RunFlags& flags);

// Runs the steps, printing a line per --log-every steps on rank 0.
exec::TrainingResult run_steps(const Plan& plan, exec::Communicator& comm, const RunFlags& flags, std::ostream& out);

}  // namespace zerolens::cli
