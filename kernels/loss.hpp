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

}  // namespace zerolens::kernels
