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

// Consecutive data-parallel ranks in groups of `size` (color: the group, key: the place in it),
// or the ranks `size` apart (`across`: color the place, key the group).
std::unique_ptr<Communicator> split_data(Communicator& data, const char* flag, int size,
                                         bool across) {
  const int group = data.rank() / size, place = data.rank() % size;
  std::unique_ptr<Communicator> part = across ? data.split(place, group) : data.split(group, place);
  if (!part) {
    throw InputError(flag,
                     "this backend's communicator cannot split the data-parallel group (hybrid "
                     "sharding and hpZ run on the CPU backend's MPI)");
  }
  return part;
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
    : ProcessGroups(world, shape, 0, 0, expert_parallel) {}

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
    : ProcessGroups(world, shape, 0, 0) {}

ProcessGroups::ProcessGroups(Communicator& world, const ScheduleContext& context)
    : ProcessGroups(world, context.parallel_shape(), context.shard_group, context.hpz_group,
                    context.expert_parallel) {}

ProcessGroups::ProcessGroups(Communicator& world, const ParallelShape& shape, int shard_group,
                             int hpz_group, int expert_parallel)
    : shape_(shape), world_(&world) {
  require_processes(shape, world.size());
  place_ = place_of_rank(world.rank(), shape);
  if (shape.tensor == 1 && shape.pipeline == 1) {
    data_ = world_;
  } else {
    split_model_parallel();
  }
  shard_ = data_;
  if (shard_group > 0 && shard_group < data_->size()) {
    if (data_->size() % shard_group != 0) {
      throw InputError("--shard-group", "a shard group of " + std::to_string(shard_group) +
                                            " ranks must divide the " +
                                            std::to_string(data_->size()) + " data-parallel ranks");
    }
    own_shard_ = split_data(*data_, "--shard-group", shard_group, false);
    own_replicate_ = split_data(*data_, "--shard-group", shard_group, true);
    shard_ = own_shard_.get();
    replicate_ = own_replicate_.get();
  }
  if (hpz_group > 1) {
    if (data_->size() % hpz_group != 0) {
      throw InputError("--hpz", "hpZ groups of " + std::to_string(hpz_group) +
                                    " ranks must divide the " + std::to_string(data_->size()) +
                                    " data-parallel ranks");
    }
    own_secondary_ = split_data(*data_, "--hpz", hpz_group, false);
    secondary_ = own_secondary_.get();
  }
  if (expert_parallel > 1) split_expert_groups(expert_parallel);
}

void ProcessGroups::split_model_parallel() {
  Communicator& world = *world_;
  const ParallelShape& shape = shape_;
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
