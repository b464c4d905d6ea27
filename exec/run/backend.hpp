#pragma once
// What a device backend gives a training run: its communicator (the data-parallel group), the
// memory space of the engine's Gpu buffers, the model on its buffers, and what a plan must count
// for it. The backends are built by name in exec/backends.hpp; exec/cuda/ implements "cuda".
#include <memory>
#include <string>
#include <utility>

#include "exec/comm/communicator.hpp"
#include "exec/run/training_run.hpp"

namespace zerolens::exec {

class MemorySpace;

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // What runs, for a run's header: "CPU device backend, MPI collectives".
  const std::string& description() const { return description_; }
  // MPI_COMM_WORLD's ranks, collectives on this backend's buffers: the data-parallel group, or
  // the job a run splits into its TP, DP and pipeline groups (exec/comm/process_groups.hpp).
  Communicator& communicator() { return *communicator_; }
  const Communicator& communicator() const { return *communicator_; }
  // Where the engine's Gpu buffers go (the communicator's space; nullptr: host memory).
  MemorySpace* memory_space() const { return communicator_->memory_space(); }
  // Device memory per rank the backend's libraries take that a plan must count as
  // LibraryWorkspace (the model charges it to the ledger): none on the CPU, cuBLAS's on CUDA.
  Bytes library_workspace_bytes() const { return library_workspace_bytes_; }
  // What a plan for this backend counts and leaves out, for the plan's notes.
  const std::string& plan_note() const { return plan_note_; }

  // The GPT-2 the engine trains on this backend's buffers, its activations charged to `ledger`.
  virtual std::unique_ptr<LayerModel> make_model(const Model& model, const Gpt2Options& options,
                                                 MemoryLedger& ledger) const = 0;
  // make_model as train_gpt2 takes it; valid while this backend lives.
  Gpt2Factory model_factory() const {
    return [this](const Model& model, const Gpt2Options& options, MemoryLedger& ledger) {
      return make_model(model, options, ledger);
    };
  }

 protected:
  // Inline, so that exec/cuda's backend needs only this header, not the factory's library (which
  // links exec/cuda).
  Backend(std::unique_ptr<Communicator> communicator, std::string description,
          Bytes library_workspace_bytes, std::string plan_note)
      : communicator_(std::move(communicator)),
        description_(std::move(description)),
        library_workspace_bytes_(library_workspace_bytes),
        plan_note_(std::move(plan_note)) {}

 private:
  std::unique_ptr<Communicator> communicator_;
  std::string description_;
  Bytes library_workspace_bytes_ = 0;
  std::string plan_note_;
};

}  // namespace zerolens::exec
