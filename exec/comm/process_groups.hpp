#pragma once
// The process groups of a job with tensor, data and pipeline parallelism, split off the world's
// communicator by sim's numbering of ranks (place_of_rank: TP innermost, then DP, then stages):
// a rank's TP group (the ranks of its DP index and stage), its DP group (its TP index and stage),
// its pipeline group (every stage of its TP and DP index) and, between the first and last stage,
// the tied embedding's group. Without TP and PP the world is the DP group itself (no split: a
// communicator that cannot split, as NCCL's, still runs data parallelism).
// The data-parallel group subdivides as sim's ScheduleContext says: hybrid sharding's shard groups
// (shard_group consecutive DP ranks, over which stage 3 partitions) and their replicate groups
// (the ranks at the same place of every shard group), ZeRO++ hpZ's secondary groups (hpz_group
// consecutive DP ranks).
#include <memory>

#include "exec/comm/communicator.hpp"
#include "sim/schedule/schedule.hpp"

namespace zerolens::exec {

class ProcessGroups {
 public:
  // Collective over `world`, whose size must be shape.world() (InputError naming --gpus
  // otherwise); a communicator that cannot split refuses TP and PP (InputError naming --tp or
  // --pp).
  ProcessGroups(Communicator& world, const ParallelShape& shape);
  // The same with the data-parallel group's subdivisions (`shard_group`, `hpz_group`: 0 none); a
  // communicator that cannot split refuses them (InputError naming --shard-group or --hpz).
  // `expert_parallel` above 1 splits the MoE groups too (as the constructor below).
  ProcessGroups(Communicator& world, const ParallelShape& shape, int shard_group, int hpz_group,
                int expert_parallel = 1);
  // The plan's shape, subdivisions and expert-parallel groups.
  ProcessGroups(Communicator& world, const ScheduleContext& context);
  // With `expert_parallel` above 1 (dividing the data-parallel ranks; InputError naming --ep
  // otherwise) also the MoE groups DeepSpeed's _create_expert_and_data_parallel makes (sim's
  // ProcessGroup::Expert and ExpertData): the EP group, expert_parallel consecutive ranks of this
  // rank's DP group, and the expert-data-parallel group, the DP ranks expert_parallel apart (which
  // hold the same experts), split off the DP group.
  ProcessGroups(Communicator& world, const ParallelShape& shape, int expert_parallel);
  // The constructor's check of the world's size alone (InputError naming --gpus).
  static void require_processes(const ParallelShape& shape, int processes);

  const ParallelShape& shape() const { return shape_; }
  const RankPlace& place() const { return place_; }
  Communicator& world() const { return *world_; }
  Communicator& data() const { return *data_; }
  Communicator* tensor() const { return tensor_; }      // nullptr without TP
  Communicator* pipeline() const { return pipeline_; }  // nullptr without PP
  // The first and last stage of this rank's TP and DP index (nullptr on other stages, and
  // without PP).
  Communicator* embedding() const { return embedding_; }
  // The ranks stage 3 partitions over, where the schedule's Data-group ops run: the data-parallel
  // group, or this rank's shard group under hybrid sharding.
  Communicator& shard() const { return *shard_; }
  Communicator* replicate() const { return replicate_; }  // nullptr without hybrid sharding
  Communicator* secondary() const { return secondary_; }  // hpZ's group; nullptr without
  Communicator* expert() const { return expert_.get(); }            // nullptr without EP
  Communicator* expert_data() const { return expert_data_.get(); }  // nullptr without EP
  bool first_stage() const { return place_.stage == 0; }
  bool last_stage() const { return place_.stage + 1 == shape_.pipeline; }

 private:
  void split_model_parallel();  // the DP, TP, pipeline and embedding groups
  void split_expert_groups(int expert_parallel);

  ParallelShape shape_;
  RankPlace place_;
  Communicator* world_;
  std::unique_ptr<Communicator> own_data_, own_tensor_, own_pipeline_, own_embedding_;
  std::unique_ptr<Communicator> own_shard_, own_replicate_, own_secondary_;
  Communicator* shard_ = nullptr;
  Communicator* replicate_ = nullptr;
  Communicator* secondary_ = nullptr;
  std::unique_ptr<Communicator> expert_, expert_data_;
  Communicator* data_ = nullptr;
  Communicator* tensor_ = nullptr;
  Communicator* pipeline_ = nullptr;
  Communicator* embedding_ = nullptr;
};

}  // namespace zerolens::exec
