// Softmax cross-entropy: one block per row of V logits (three passes: max, sum of exponentials,
// probabilities), the loss from logsumexp so it stays finite when a probability underflows.
#include <cmath>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/loss.hpp"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned block_size = 512;

__global__ void crossentropy_forward_kernel(float* losses, float* probs, const float* logits,
                                            const int* targets, std::size_t vocab_size) {
  __shared__ float scratch[32];
  const std::size_t row = blockIdx.x;
  const float* x = logits + row * vocab_size;
  float maximum = -INFINITY;
  for (std::size_t v = threadIdx.x; v < vocab_size; v += blockDim.x) maximum = fmaxf(maximum, x[v]);
  maximum = device::block_max(maximum, scratch);
  float sum = 0.0f;
  for (std::size_t v = threadIdx.x; v < vocab_size; v += blockDim.x) sum += expf(x[v] - maximum);
  sum = device::block_sum(sum, scratch);
  const float inverse = 1.0f / sum;
  float* p = probs + row * vocab_size;
  for (std::size_t v = threadIdx.x; v < vocab_size; v += blockDim.x)
    p[v] = expf(x[v] - maximum) * inverse;
  if (threadIdx.x == 0) {
    const int target = targets[row];
    losses[row] =
        target >= 0 && std::size_t(target) < vocab_size ? logf(sum) + maximum - x[target] : NAN;
  }
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* dlosses,
                                             const float* probs, const int* targets,
                                             std::size_t vocab_size) {
  const std::size_t row = blockIdx.x;
  const float dloss = dlosses[row];
  const long long target = targets[row];
  const float* p = probs + row * vocab_size;
  float* d = dlogits + row * vocab_size;
  for (std::size_t v = threadIdx.x; v < vocab_size; v += blockDim.x)
    d[v] += (p[v] - (static_cast<long long>(v) == target ? 1.0f : 0.0f)) * dloss;
}

}  // namespace

void crossentropy_softmax_forward(float* losses, float* probs, const float* logits,
                                  const int* targets, std::size_t rows, std::size_t vocab_size,
                                  cudaStream_t stream) {
  if (rows == 0 || vocab_size == 0) return;
  crossentropy_forward_kernel<<<unsigned(rows), block_size, 0, stream>>>(losses, probs, logits,
                                                                         targets, vocab_size);
  check_launch("crossentropy_forward_kernel");
}

void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                   const int* targets, std::size_t rows, std::size_t vocab_size,
                                   cudaStream_t stream) {
  if (rows == 0 || vocab_size == 0) return;
  crossentropy_backward_kernel<<<unsigned(rows), block_size, 0, stream>>>(dlogits, dlosses, probs,
                                                                          targets, vocab_size);
  check_launch("crossentropy_backward_kernel");
}

}  // namespace zerolens::kernels::cuda
