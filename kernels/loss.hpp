#pragma once
// Fused softmax + cross-entropy over the vocabulary for logits [rows, V] (rows = B*T).
#include <cstddef>

namespace zerolens::kernels {

// probs[row, :] = softmax(logits[row, :]); losses[row] = -log probs[row, targets[row]], computed as
// logsumexp(logits[row, :]) - logits[row, target] in double (finite even when the probability
// underflows). Both outputs are overwritten. Throws std::out_of_range for a target outside [0, V)
// before writing anything.
void crossentropy_softmax_forward(float* losses, float* probs, const float* logits,
                                  const int* targets, std::size_t rows, std::size_t vocab_size);

// ACCUMULATES (+=) dlogits[row, v] += (probs[row, v] - [v == targets[row]]) * dlosses[row], the
// gradient of sum_row dlosses[row] * losses[row]. For the mean loss over B*T positions pass
// dlosses[row] = 1 / (B*T). Zero dlogits first to get exactly (probs - onehot) * dloss.
void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                   const int* targets, std::size_t rows, std::size_t vocab_size);

// The vocabulary-parallel cross-entropy (Megatron's _VocabParallelCrossEntropy) in three steps
// around the tensor-parallel group's reductions. A rank holds logits [rows, shard] of vocabulary
// rows first_token .. first_token + shard - 1, of which the first `valid` are real tokens (the rest
// pad the vocabulary to a multiple of the group: they take no part, as if absent).
// 1. row_max[row] = the largest of the row's valid logits (-infinity when there are none); the
//    group's maximum is then all-reduced.
void crossentropy_shard_max(float* row_max, const float* logits, std::size_t rows,
                            std::size_t shard, std::size_t valid);
// 2. exps[row, v] = exp(logits[row, v] - row_max[row]) for valid v, 0 for the padding;
//    exp_sums[row] = their sum (in double); target_logits[row] = the logit of targets[row] when
//    this rank holds it, 0 otherwise. Both are then summed over the group. Throws std::out_of_range
//    for a negative target.
void crossentropy_shard_sums(float* exp_sums, float* target_logits, float* exps,
                             const float* logits, const float* row_max, const int* targets,
                             std::size_t first_token, std::size_t rows, std::size_t shard,
                             std::size_t valid);
// 3. With the group's sums: probs = exps / exp_sums (in place) and
//    losses[row] = log(exp_sums[row]) - (target_logits[row] - row_max[row]).
void crossentropy_shard_finish(float* losses, float* probs, const float* exp_sums,
                               const float* row_max, const float* target_logits, std::size_t rows,
                               std::size_t shard);
// ACCUMULATES dlogits[row, v] += (probs[row, v] - [first_token + v == targets[row]]) *
// dlosses[row].
void crossentropy_shard_backward(float* dlogits, const float* dlosses, const float* probs,
                                 const int* targets, std::size_t first_token, std::size_t rows,
                                 std::size_t shard);

}  // namespace zerolens::kernels
