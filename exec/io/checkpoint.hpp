#pragma once
// ZeRO checkpoints: each rank saves the fp32 master weights and optimizer states it owns (runs of
// tensor elements) with the metadata to put them back together; loading with any number of ranks
// reassembles whole tensors and hands each rank its new partition (resharding); consolidation
// writes the whole fp32 model in the safetensors layout (as DeepSpeed's zero_to_fp32 does).
//
// On disk, under a checkpoint directory:
//   step_<N>/manifest.json     version 2, the save's save_id, model tensors (names, shapes), run
//                              facts, and per rank file its size and body CRC-32
//   step_<N>/rank_<R>.bin      "ZLCKPT02", u64 header length, JSON header (version, save_id, rank,
//                              segments, counts), the float32 payload (master, then each optimizer
//                              state), CRC-32 of all that precedes it (the body CRC-32)
//   latest                     the name of the newest complete step directory
// A save writes step_<N>.partial/ and renames it only when every rank's file is complete, then
// replaces `latest` by rename, so a failed save (full or unwritable disk) leaves the previous
// checkpoint as it was.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/core/units.hpp"

namespace zerolens::exec {

class Communicator;

// A checkpoint that cannot be written or read: names the file and what is wrong with it.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CheckpointTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  Elements numel = 0;
};

// A run of elements [begin, begin + length) of one tensor.
struct CheckpointSegment {
  std::int32_t tensor = 0;
  Elements begin = 0, length = 0;
};

struct CheckpointMeta {
  std::string model;
  std::vector<CheckpointTensor> tensors;
  std::int64_t step = 0;            // optimizer steps taken
  int dp_size = 1, stage = 0;
  std::string optimizer;            // "adam", "adamw", "sgd"
  int optimizer_states = 0;         // state arrays per element (Adam 2, SGD with momentum 1)
  double loss_scale = 1;            // fp16 dynamic loss scale (1 otherwise)
  std::int64_t good_steps = 0;      // steps since the last overflow (loss-scale window)
  int hysteresis_left = 0;
};

// What one rank owns: segments, and per segment element the master weight and each state.
struct RankShard {
  int rank = 0;
  std::vector<CheckpointSegment> segments;
  std::vector<float> master;
  std::vector<std::vector<float>> states;  // optimizer_states arrays, each parallel to master
};

// Whole tensors, in tensor order: what loading reshards from and consolidation writes.
struct FullState {
  CheckpointMeta meta;
  std::vector<std::vector<float>> master;                // per tensor
  std::vector<std::vector<std::vector<float>>> states;   // per state, per tensor
};

// Collective: every rank calls it with its shard. Returns the step directory written. Throws
// CheckpointError on every rank when any rank fails (nothing replaces the previous checkpoint).
std::filesystem::path save_checkpoint(const std::filesystem::path& directory, const CheckpointMeta& meta,
                                      const RankShard& shard, Communicator& comm);

// The newest complete step directory under `directory` (from `latest`), or `directory` itself when
// it is a step directory. Throws CheckpointError when there is none.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& directory);

// Reads (bounded, regular files only) and verifies (sizes, body CRC-32s against the manifest, each
// header's save_id and rank, segments inside their tensors, every element owned exactly once) all
// rank files of a step directory and assembles whole tensors. Throws CheckpointError.
FullState load_checkpoint(const std::filesystem::path& step_directory);

// The fp32 master weights as one safetensors file (8-byte little-endian header length, JSON
// header with dtype F32, shape and data_offsets per tensor, then the data), written whole or not at
// all. Throws CheckpointError (a tensor named __metadata__, a failed write naming the OS error).
void write_safetensors(const std::filesystem::path& file, const FullState& state);

}  // namespace zerolens::exec
