#pragma once
// Fully connected layer on row-major float32 activations, through CBLAS (OpenBLAS).
#include <cstddef>

namespace zerolens::kernels {

// out[rows, out_channels] = inp[rows, in_channels] · weight[out_channels, in_channels]ᵀ + bias.
// `rows` is B*T. `bias` may be nullptr (no bias). `out` is overwritten.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    std::size_t rows, std::size_t in_channels, std::size_t out_channels);

// Gradients of matmul_forward given dout[rows, out_channels]; ACCUMULATES (+=) into
// dinp[rows, in_channels], dweight[out_channels, in_channels] and dbias[out_channels].
// `dinp` may be nullptr (first layer: no input gradient wanted); `dbias` may be nullptr (no bias).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::size_t rows, std::size_t in_channels,
                     std::size_t out_channels);

// A bias added after the product (Megatron's RowParallelLinear adds its bias once the partial
// products are summed over the tensor-parallel group): out[row, :] += bias for every row.
void bias_forward(float* out, const float* bias, std::size_t rows, std::size_t channels);
// ACCUMULATES (+=) the column sums of dout[rows, channels] into dbias[channels].
void bias_backward(float* dbias, const float* dout, std::size_t rows, std::size_t channels);

}  // namespace zerolens::kernels
