#include "exec/comm/process_groups.hpp"

#include <string>

#include "sim/core/error.hpp"

namespace zerolens::exec {
namespace {

// A group's color is the world rank of its first member (unique per group), its key the rank's
// index within it.
std::unique_ptr<Communicator> split(Communicator& world, const char* flag, RankPlace first,
                                    const ParallelShape& shape, int key) {
  std::unique_ptr<Communicator> group = world.split(rank_at(first, shape), key);
  if (!group) {
    throw InputError(flag,
                     "this backend's communicator cannot split into process groups (tensor "
                     "and pipeline parallelism run on the CPU backend's MPI)");
  }
  return group;
}

}  // namespace

void ProcessGroups::require_processes(const ParallelShape& shape, int processes) {
  if (processes != shape.world()) {
    throw InputError(
        "--gpus", std::to_string(shape.data) + " data-parallel x " + std::to_string(shape.tensor) +
                      " tensor-parallel x " + std::to_string(shape.pipeline) +
                      " pipeline ranks need " + std::to_string(shape.world()) + " processes, but " +
                      std::to_string(processes) + " are running (start with mpirun -np " +
                      std::to_string(shape.world()) + ")");
  }
}

ProcessGroups::ProcessGroups(Communicator& world, const ParallelShape& shape, int expert_parallel)
    : ProcessGroups(world, shape) {
  if (expert_parallel > 1) split_expert_groups(expert_parallel);
}

void ProcessGroups::split_expert_groups(int ep) {
  if (shape_.data % ep != 0) {
    throw InputError("--ep", std::to_string(ep) + " does not divide the " +
                                 std::to_string(shape_.data) + " data-parallel ranks");
  }
  // Within the DP group a rank's index is its place's data index (the split's key).
  const int d = place_.data;
  expert_ = data_->split(d / ep, d % ep);
  expert_data_ = data_->split(d % ep, d / ep);
  if (!expert_ || !expert_data_) {
    throw InputError("--ep",
                     "this backend's communicator cannot split into process groups (expert "
                     "parallelism's groups are split off the data-parallel group)");
  }
}

ProcessGroups::ProcessGroups(Communicator& world, const ParallelShape& shape)
    : shape_(shape), world_(&world) {
  require_processes(shape, world.size());
  place_ = place_of_rank(world.rank(), shape);
  if (shape.tensor == 1 && shape.pipeline == 1) {
    data_ = world_;
    return;
  }
  const RankPlace p = place_;
  const char* flag = shape.tensor > 1 ? "--tp" : "--pp";
  own_data_ = split(world, flag, {.tensor = p.tensor, .stage = p.stage}, shape, p.data);
  data_ = own_data_.get();
  if (shape.tensor > 1) {
    own_tensor_ = split(world, flag, {.data = p.data, .stage = p.stage}, shape, p.tensor);
    tensor_ = own_tensor_.get();
  }
  if (shape.pipeline > 1) {
    own_pipeline_ = split(world, flag, {.tensor = p.tensor, .data = p.data}, shape, p.stage);
    pipeline_ = own_pipeline_.get();
    const bool end = first_stage() || last_stage();
    own_embedding_ =
        world.split(end ? rank_at({.tensor = p.tensor, .data = p.data}, shape) : -1, p.stage);
    embedding_ = own_embedding_.get();
  }
}

}  // namespace zerolens::exec
