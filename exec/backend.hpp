#pragma once
// The device backend of a training run, assembled in one place from its name: "cpu" (host memory
// stands in for the GPU's, MPI collectives, Gpt2Model) or "cuda" (each rank's GPU: NCCL or
// host-staged MPI collectives, the caching allocator over the GPU's memory, CudaGpt2Model).
// Callers name a backend and need no CUDA header or build flag: whether this build and machine
// can run it is decided here (backend.cpp, the only file that knows whether CUDA is built) and
// refused as an InputError naming --device, the flag every caller takes the name from.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/calibrate.hpp"
#include "exec/communicator.hpp"
#include "exec/training_run.hpp"

namespace zerolens::exec {

class MemorySpace;

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // What runs, for a run's header: "CPU device backend, MPI collectives".
  const std::string& description() const { return description_; }
  // The data-parallel group (MPI_COMM_WORLD's ranks), collectives on this backend's buffers.
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

// The names make_backend accepts, "cpu" then "cuda" (a build without CUDA lists cuda too and
// refuses it, saying why).
const std::vector<std::string>& backend_names();

// Collective over MPI_COMM_WORLD (MPI is initialised as by make_mpi_communicator). Throws
// InputError "--device: '<name>' is not a device (cpu, cuda)" for an unknown name, and
// "--device cuda: <why>" on every rank when cuda cannot run: the build has no CUDA, or a rank has
// no GPU ("no CUDA device on rank R: <the probe's failing call and error>").
std::unique_ptr<Backend> make_backend(const std::string& name);

// The GPU side of `zerolens calibrate --device <name>` (exec/calibrate.hpp): nullptr for cpu,
// whose ranks are measured as the CPU backend's GPUs. Collective; throws as make_backend does.
std::unique_ptr<DeviceCalibrator> make_device_calibrator(const std::string& name);

}  // namespace zerolens::exec
