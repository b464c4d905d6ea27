// The bias gradient: per column, the sum over rows (cuBLAS has no accumulating column sum).
#include <algorithm>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/matmul.hpp"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

constexpr unsigned tile_columns = 32, tile_rows = 8;

// Block (32 columns x 8 row lanes): reads stay coalesced along a row; each block folds its rows
// in shared memory and adds its 32 partial sums atomically (blocks along y split the rows).
__global__ void column_sum_kernel(float* sums, const float* in, std::size_t rows,
                                  std::size_t columns) {
  __shared__ float partial[tile_rows][tile_columns];
  const std::size_t column = std::size_t(blockIdx.x) * tile_columns + threadIdx.x;
  float sum = 0.0f;
  if (column < columns)
    for (std::size_t row = std::size_t(blockIdx.y) * tile_rows + threadIdx.y; row < rows;
         row += std::size_t(gridDim.y) * tile_rows)
      sum += in[row * columns + column];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < columns) {
    for (unsigned r = 1; r < tile_rows; ++r) sum += partial[r][threadIdx.x];
    atomicAdd(&sums[column], sum);
  }
}

}  // namespace

void column_sum_accumulate(float* dbias, const float* dout, std::size_t rows, std::size_t columns,
                           cudaStream_t stream) {
  if (rows == 0 || columns == 0) return;
  const dim3 block(tile_columns, tile_rows);
  const auto column_blocks = unsigned((columns + tile_columns - 1) / tile_columns);
  // About 64 rows per thread bounds the atomics while giving enough blocks to fill the GPU.
  const auto row_blocks = unsigned(std::min<std::size_t>((rows + 511) / 512, 1024));
  column_sum_kernel<<<dim3(column_blocks, row_blocks), block, 0, stream>>>(dbias, dout, rows,
                                                                           columns);
  check_launch("column_sum_kernel");
}

}  // namespace zerolens::kernels::cuda
