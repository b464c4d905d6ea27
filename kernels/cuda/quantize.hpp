#pragma once
// Symmetric int8/int4 block quantization on the GPU, bit-identical to kernels/quantize.hpp (the
// same scales, codes, packing and non-finite rule; IEEE division and rounding on both sides).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace zerolens::kernels::cuda {

// Device pointers; sizes as kernels/quantize.hpp states (quantized_code_bytes,
// quantization_blocks). `bits` 8 or 4 and `block` > 0 (std::invalid_argument otherwise).
// Asynchronous on `stream`.
void quantize_blocks(std::uint8_t* codes, float* scales, const float* in, std::size_t count,
                     std::size_t block, int bits, cudaStream_t stream);
void dequantize_blocks(float* out, const std::uint8_t* codes, const float* scales,
                       std::size_t count, std::size_t block, int bits, cudaStream_t stream);
// out[i] += dequantized element i.
void dequantize_add_blocks(float* out, const std::uint8_t* codes, const float* scales,
                           std::size_t count, std::size_t block, int bits, cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
