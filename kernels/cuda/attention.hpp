#pragma once
// Causal multi-head self-attention on the GPU, same layout and contract as kernels/attention.hpp:
// qkv inp [B, T, 3C]; out [B, T, C]; saved preatt (scaled scores, -inf above the diagonal) and att
// (causal softmax, 0 above the diagonal), both [B, NH, T, T]. The score GEMMs are cuBLAS
// strided-batched GEMMs over the heads, reading q, k, v in place (no permuted copies).
#include <cuda_runtime_api.h>

#include "kernels/attention.hpp"
#include "kernels/cuda/blas.hpp"

namespace zerolens::kernels::cuda {

// Throws std::invalid_argument when C is not divisible by NH.
void attention_forward(float* out, float* preatt, float* att, const float* inp,
                       const AttentionShape& shape, const BlasHandles& handles,
                       cudaStream_t stream);

// ACCUMULATES (+=) dinp [B, T, 3C] from dout [B, T, C]; `dscores` [B, NH, T, T] is scratch for the
// score gradients (overwritten), as in the CPU overload that takes it.
void attention_backward(float* dinp, float* dscores, const float* dout, const float* inp,
                        const float* att, const AttentionShape& shape, const BlasHandles& handles,
                        cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
