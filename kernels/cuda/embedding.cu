// GPT-2 encoder: gathers in forward; deterministic scatter-adds in backward (no atomics).
#include <climits>
#include <stdexcept>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned block_size = 256;

__device__ inline bool in_vocab(int token, std::size_t vocab_size) {
  return token >= 0 && std::size_t(token) < vocab_size;
}

__global__ void encoder_forward_kernel(float* out, const int* tokens, const float* wte,
                                       const float* wpe, std::size_t rows, std::size_t seq_len,
                                       std::size_t channels, std::size_t vocab_size) {
  for (std::size_t i = device::global_index(); i < rows * channels; i += device::global_stride()) {
    const std::size_t row = i / channels, c = i % channels;
    const int token = tokens[row];
    if (!in_vocab(token, vocab_size)) continue;
    out[i] = wte[std::size_t(token) * channels + c] + wpe[(row % seq_len) * channels + c];
  }
}

// One thread per (t, c): dwpe[t, c] += dout[b, t, c] for b = 0, 1, ... in order.
__global__ void position_backward_kernel(float* dwpe, const float* dout, std::size_t batch,
                                         std::size_t seq_len, std::size_t channels) {
  const std::size_t count = seq_len * channels;
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride()) {
    float sum = dwpe[i];
    for (std::size_t b = 0; b < batch; ++b) sum += dout[b * count + i];
    dwpe[i] = sum;
  }
}

// One block per row: the block of a token's first occurrence adds every row carrying that token,
// in row order, into the token's dwte row; the blocks of later occurrences do nothing.
__global__ void token_backward_kernel(float* dwte, const float* dout, const int* tokens,
                                      std::size_t rows, std::size_t channels,
                                      std::size_t vocab_size) {
  const std::size_t row = blockIdx.x;
  const int token = tokens[row];
  if (!in_vocab(token, vocab_size)) return;
  int seen_before = 0;
  for (std::size_t r = threadIdx.x; r < row; r += blockDim.x) seen_before |= tokens[r] == token;
  if (__syncthreads_or(seen_before)) return;
  float* grad = dwte + std::size_t(token) * channels;
  for (std::size_t c = threadIdx.x; c < channels; c += blockDim.x) {
    float sum = grad[c];
    for (std::size_t r = row; r < rows; ++r) {
      if (tokens[r] == token) sum += dout[r * channels + c];
    }
    grad[c] = sum;
  }
}

}  // namespace

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                     std::size_t batch, std::size_t seq_len, std::size_t channels,
                     std::size_t vocab_size, cudaStream_t stream) {
  const std::size_t count = batch * seq_len * channels;
  if (count == 0) return;
  encoder_forward_kernel<<<grid_for(count, block_size), block_size, 0, stream>>>(
      out, tokens, wte, wpe, batch * seq_len, seq_len, channels, vocab_size);
  check_launch("encoder_forward_kernel");
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                      std::size_t batch, std::size_t seq_len, std::size_t channels,
                      std::size_t vocab_size, cudaStream_t stream) {
  const std::size_t rows = batch * seq_len;
  if (rows == 0 || channels == 0) return;
  if (rows > std::size_t(INT_MAX)) throw std::invalid_argument("encoder_backward: more rows than a grid holds");
  position_backward_kernel<<<grid_for(seq_len * channels, block_size), block_size, 0, stream>>>(
      dwpe, dout, batch, seq_len, channels);
  check_launch("position_backward_kernel");
  token_backward_kernel<<<unsigned(rows), block_size, 0, stream>>>(dwte, dout, tokens, rows, channels,
                                                                   vocab_size);
  check_launch("token_backward_kernel");
}

}  // namespace zerolens::kernels::cuda
