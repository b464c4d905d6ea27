#pragma once
// Model parallelism beside ZeRO's data parallelism (docs/parallelism.md).
#include <cstdint>

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

}  // namespace zerolens
