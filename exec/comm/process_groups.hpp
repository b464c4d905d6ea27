#pragma once
// The process groups of a job with tensor, data and pipeline parallelism, split off the world's
// communicator by sim's numbering of ranks (place_of_rank: TP innermost, then DP, then stages):
// a rank's TP group (the ranks of its DP index and stage), its DP group (its TP index and stage),
// its pipeline group (every stage of its TP and DP index) and, between the first and last stage,
// the tied embedding's group. Without TP and PP the world is the DP group itself (no split: a
// communicator that cannot split, as NCCL's, still runs data parallelism).
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
  Communicator* expert() const { return expert_.get(); }            // nullptr without EP
  Communicator* expert_data() const { return expert_data_.get(); }  // nullptr without EP
  bool first_stage() const { return place_.stage == 0; }
  bool last_stage() const { return place_.stage + 1 == shape_.pipeline; }

 private:
  void split_expert_groups(int expert_parallel);

  ParallelShape shape_;
  RankPlace place_;
  Communicator* world_;
  std::unique_ptr<Communicator> own_data_, own_tensor_, own_pipeline_, own_embedding_;
  std::unique_ptr<Communicator> expert_, expert_data_;
  Communicator* data_ = nullptr;
  Communicator* tensor_ = nullptr;
  Communicator* pipeline_ = nullptr;
  Communicator* embedding_ = nullptr;
};

}  // namespace zerolens::exec
