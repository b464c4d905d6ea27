// LayerNorm: one warp per row (rows are short: C channels), two passes for the variance so a large
// common offset loses no digits; the weight/bias gradients are column sums over rows.
#include <algorithm>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/runtime.hpp"
#include "kernels/layernorm.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned warps_per_block = 8;

__device__ inline std::size_t warp_row() {
  return std::size_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, std::size_t rows,
                                         std::size_t channels) {
  const std::size_t row = warp_row();
  if (row >= rows) return;
  const unsigned lane = threadIdx.x % 32;
  const float* x = inp + row * channels;
  float sum = 0.0f;
  for (std::size_t c = lane; c < channels; c += 32) sum += x[c];
  const float m = device::warp_sum(sum) / float(channels);
  float squares = 0.0f;
  for (std::size_t c = lane; c < channels; c += 32) squares += (x[c] - m) * (x[c] - m);
  const float s = rsqrtf(device::warp_sum(squares) / float(channels) + layernorm_eps);
  float* y = out + row * channels;
  for (std::size_t c = lane; c < channels; c += 32) y[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = weight * dout.
__global__ void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                      const float* weight, const float* mean, const float* rstd,
                                      std::size_t rows, std::size_t channels) {
  const std::size_t row = warp_row();
  if (row >= rows) return;
  const unsigned lane = threadIdx.x % 32;
  const float* x = inp + row * channels;
  const float* dy = dout + row * channels;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (std::size_t c = lane; c < channels; c += 32) {
    const float dnorm = weight[c] * dy[c];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * (x[c] - m) * s;
  }
  const float dnorm_mean = device::warp_sum(dnorm_sum) / float(channels);
  const float dnorm_norm_mean = device::warp_sum(dnorm_norm_sum) / float(channels);
  float* dx = dinp + row * channels;
  for (std::size_t c = lane; c < channels; c += 32) {
    const float norm = (x[c] - m) * s;
    dx[c] += s * (weight[c] * dy[c] - dnorm_mean - norm * dnorm_norm_mean);
  }
}

constexpr unsigned tile_columns = 32, tile_rows = 8;

// dweight[c] += sum_rows dout * norm, dbias[c] += sum_rows dout: the column sums of matmul.cu's
// bias gradient, with the normalised input recomputed from the saved statistics.
__global__ void layernorm_dparams_kernel(float* dweight, float* dbias, const float* dout,
                                         const float* inp, const float* mean, const float* rstd,
                                         std::size_t rows, std::size_t channels) {
  __shared__ float partial_weight[tile_rows][tile_columns], partial_bias[tile_rows][tile_columns];
  const std::size_t column = std::size_t(blockIdx.x) * tile_columns + threadIdx.x;
  float sum_weight = 0.0f, sum_bias = 0.0f;
  if (column < channels)
    for (std::size_t row = std::size_t(blockIdx.y) * tile_rows + threadIdx.y; row < rows;
         row += std::size_t(gridDim.y) * tile_rows) {
      const std::size_t i = row * channels + column;
      sum_weight += dout[i] * (inp[i] - mean[row]) * rstd[row];
      sum_bias += dout[i];
    }
  partial_weight[threadIdx.y][threadIdx.x] = sum_weight;
  partial_bias[threadIdx.y][threadIdx.x] = sum_bias;
  __syncthreads();
  if (threadIdx.y == 0 && column < channels) {
    for (unsigned r = 1; r < tile_rows; ++r) {
      sum_weight += partial_weight[r][threadIdx.x];
      sum_bias += partial_bias[r][threadIdx.x];
    }
    atomicAdd(&dweight[column], sum_weight);
    atomicAdd(&dbias[column], sum_bias);
  }
}

unsigned row_blocks(std::size_t rows) {
  return unsigned((rows + warps_per_block - 1) / warps_per_block);
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, std::size_t rows, std::size_t channels,
                       cudaStream_t stream) {
  if (rows == 0 || channels == 0) return;
  layernorm_forward_kernel<<<row_blocks(rows), 32 * warps_per_block, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, rows, channels);
  check_launch("layernorm_forward_kernel");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        std::size_t rows, std::size_t channels, cudaStream_t stream) {
  if (rows == 0 || channels == 0) return;
  layernorm_dinp_kernel<<<row_blocks(rows), 32 * warps_per_block, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, rows, channels);
  check_launch("layernorm_dinp_kernel");
  const dim3 grid(unsigned((channels + tile_columns - 1) / tile_columns),
                  unsigned(std::min<std::size_t>((rows + 511) / 512, 1024)));
  layernorm_dparams_kernel<<<grid, dim3(tile_columns, tile_rows), 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, rows, channels);
  check_launch("layernorm_dparams_kernel");
}

}  // namespace zerolens::kernels::cuda
