#pragma once
// GPT-2 encoder (token plus learned position embedding) on the GPU, same layout and contract as
// kernels/embedding.hpp, except that tokens (device int32) are not checked on the host: a token
// outside [0, vocab_size) leaves its output row unwritten (forward) and adds nothing to dwte
// (backward).
#include <cuda_runtime_api.h>

#include <cstddef>

namespace zerolens::kernels::cuda {

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]; out [B, T, C] is overwritten.
void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                     std::size_t batch, std::size_t seq_len, std::size_t channels,
                     std::size_t vocab_size, cudaStream_t stream);

// ACCUMULATES (+=) dout [B, T, C] into dwte's rows picked by the tokens and into dwpe[t]. No atomics:
// each dwte row is summed by one block over the positions carrying its token in (b, t) order, each
// dwpe element by one thread over b, so the results are deterministic and equal the CPU loop's
// (the same additions in the same order).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                      std::size_t batch, std::size_t seq_len, std::size_t channels,
                      std::size_t vocab_size, cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
