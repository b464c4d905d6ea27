#pragma once
// Casts between fp32 and 16-bit floats (uint16_t bit patterns) and the loss-scale gradient unscale
// on the GPU, bit-identical to kernels/precision.hpp (round to nearest even, NaN kept quiet).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace zerolens::kernels::cuda {

enum class HalfFormat { bf16, fp16 };

void cast_to_half(std::uint16_t* out, const float* in, std::size_t count, HalfFormat format,
                  cudaStream_t stream);
void cast_from_half(float* out, const std::uint16_t* in, std::size_t count, HalfFormat format,
                    cudaStream_t stream);

// One pass over fp16-training gradients: grads[i] *= inverse_scale, and *found_non_finite = 1
// (a device int) when any input or result is +-inf or NaN. The flag is only ever set, never
// cleared: zero it once before unscaling all the gradients of a step, then read it once.
void unscale_grads(float* grads, std::size_t count, float inverse_scale, int* found_non_finite,
                   cudaStream_t stream);
// The same from 16-bit gradients into fp32 `out` (out[i] = float(grads[i]) * inverse_scale).
void unscale_grads(float* out, const std::uint16_t* grads, HalfFormat format, std::size_t count,
                   float inverse_scale, int* found_non_finite, cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
