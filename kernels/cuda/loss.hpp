#pragma once
// Fused softmax + cross-entropy over the vocabulary on the GPU, same contract as kernels/loss.hpp
// (logits [rows, V], int32 targets), except that targets are not checked on the host: a target
// outside [0, V) makes that row's loss NaN (forward) and adds no one-hot term (backward).
#include <cuda_runtime_api.h>

#include <cstddef>

namespace zerolens::kernels::cuda {

// Overwrites probs[rows, V] = softmax(logits) and losses[rows] = logsumexp(logits) - logit[target].
void crossentropy_softmax_forward(float* losses, float* probs, const float* logits,
                                  const int* targets, std::size_t rows, std::size_t vocab_size,
                                  cudaStream_t stream);

// ACCUMULATES dlogits[row, v] += (probs[row, v] - [v == targets[row]]) * dlosses[row].
void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                   const int* targets, std::size_t rows, std::size_t vocab_size,
                                   cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
