#pragma once
// Model parallelism beside ZeRO's data parallelism (docs/parallelism.md).
#include <cstdint>
#include <string>

namespace zerolens {

// Megatron-style tensor parallelism (Shoeybi et al. 2019) and sequence parallelism (Korthikanti et
// al. 2022) of a transformer: every block's attention and MLP matrices split over `size` ranks of
// the TP group, the embedding and LM head over the vocabulary; with sequence_parallel the norms,
// dropout and residual stream are split along the sequence too.
struct TensorParallelism {
  int size = 1;
  bool sequence_parallel = false;
  // Megatron's make_vocab_size_divisible_by: under TP the vocabulary is padded to a multiple of
  // this x size (_vocab_size_with_padding), so every rank holds the same rows.
  std::int64_t vocab_multiple = 128;
  bool active() const { return size > 1; }
};

// Pipeline schedules (Huang et al. 2019; Narayanan et al. 2021): GPipe runs every micro-batch's
// forward before any backward; 1F1B (PipeDream-Flush) runs pp - stage - 1 forwards, then one
// forward and one backward in turn; interleaved 1F1B gives each stage `virtual_stages` model
// chunks.
enum class PipelineSchedule : std::uint8_t { GPipe, OneFOneB, Interleaved };
const char* to_string(PipelineSchedule schedule);
// "gpipe", "1f1b", "interleaved"; throws InputError naming `where`.
PipelineSchedule parse_pipeline_schedule(const std::string& text, const std::string& where);

// Pipeline parallelism: the layers split into `size` stages (each a rank of the pipeline group),
// the micro-batches of a step (gradient_accumulation_steps) flowing through them.
struct PipelineParallelism {
  int size = 1;
  int virtual_stages = 1;  // model chunks per stage (interleaved 1F1B)
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  bool active() const { return size > 1; }
};

// Expert parallelism of a mixture-of-experts model, as DeepSpeed's MoE layer runs it
// (deepspeed/moe/layer.py MoE(ep_size, capacity_factor, min_capacity); sharded_moe.py): each MoE
// layer's routed experts split over `size` consecutive ranks of the data-parallel group (the EP
// group, utils/groups.py _create_expert_and_data_parallel), the tokens dispatched to them and
// combined back by an all-to-all over it, each expert's buffer `capacity` tokens deep. The expert
// parameters are data-parallel over the DP / size ranks that hold the same experts.
struct ExpertParallelism {
  int size = 1;
  double capacity_factor = 1.0;  // TopKGate's capacity_factor (training); DeepSpeed's default 1.0
  int min_capacity = 4;          // MoE's min_capacity; DeepSpeed's default 4
  bool active() const { return size > 1; }
};

}  // namespace zerolens
