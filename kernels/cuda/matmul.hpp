#pragma once
// Fully connected layer on the GPU, same contract as kernels/matmul.hpp (row-major, out = inp ·
// weightᵀ + bias; backward ACCUMULATES), through cuBLASLt (forward) and cuBLAS (backward).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/blas.hpp"

namespace zerolens::kernels::cuda {

// out[rows, out_channels] = inp[rows, in_channels] · weight[out_channels, in_channels]ᵀ + bias
// (bias may be nullptr), fp32 throughout. `algorithm` picks the cuBLASLt heuristic's n-th
// candidate (0: its first choice, what the executor uses; the benchmark times the others).
// Throws std::out_of_range when the heuristic has fewer candidates.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    std::size_t rows, std::size_t in_channels, std::size_t out_channels,
                    const BlasHandles& handles, cudaStream_t stream, int algorithm = 0);

// How many candidates cuBLASLt's heuristic offers for that forward shape (at most `requested`).
int matmul_forward_algorithms(std::size_t rows, std::size_t in_channels, std::size_t out_channels,
                              bool with_bias, const BlasHandles& handles, int requested);

// The same with bf16 (uint16_t bit patterns) inputs, weight, bias and output, fp32 accumulation.
void matmul_forward_bf16(std::uint16_t* out, const std::uint16_t* inp, const std::uint16_t* weight,
                         const std::uint16_t* bias, std::size_t rows, std::size_t in_channels,
                         std::size_t out_channels, const BlasHandles& handles, cudaStream_t stream);

// ACCUMULATES (+=) dinp[rows, in], dweight[out, in] and dbias[out] from dout[rows, out]. dinp and
// dbias may be nullptr.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::size_t rows, std::size_t in_channels,
                     std::size_t out_channels, const BlasHandles& handles, cudaStream_t stream);

// dbias[c] += sum over rows of dout[row, c] (the bias gradient, also used by matmul_backward).
void column_sum_accumulate(float* dbias, const float* dout, std::size_t rows, std::size_t columns,
                           cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
