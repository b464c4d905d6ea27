#pragma once
// Element-wise operations on arrays of fp32 or 16-bit (bf16/fp16 bit patterns) numbers on the GPU,
// the arithmetic of exec/memory/numbers.cpp's host loops bit for bit: 16-bit values are widened
// exactly, each fp32 operation rounds on its own (no FMA contraction), results round to the output
// format to nearest even. Arithmetic on a NaN gives some NaN, not necessarily the CPU's payload.
// Asynchronous on `stream` like every kernel of this folder; pointers are device pointers.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace zerolens::kernels::cuda {

enum class ElementFormat { fp32, bf16, fp16 };

std::size_t element_size(ElementFormat format);  // bytes: 4 or 2

// out[i] = in[i] rounded to out_format; equal formats copy the bytes (NaN payloads kept).
void convert(void* out, ElementFormat out_format, const void* in, ElementFormat in_format,
             std::size_t count, cudaStream_t stream);

// to[i] = round(to[i] + factor * from[i]), computed in fp32.
void add_scaled(void* to, ElementFormat to_format, const void* from, ElementFormat from_format,
                std::size_t count, float factor, cudaStream_t stream);

// values[i] = round(values[i] * factor), computed in fp32.
void scale(void* values, ElementFormat format, std::size_t count, float factor,
           cudaStream_t stream);

// *found = 1 (a device int) when any element has all exponent bits set (+-inf or NaN). Only ever
// set, never cleared: zero it before the call.
void flag_inf_or_nan(const void* values, ElementFormat format, std::size_t count, int* found,
                     cudaStream_t stream);

// *result (a device double) = the sum of double(x)^2 over the widened values (0 for count 0).
// `partials` is device scratch of sum_of_squares_partials doubles. The order of summation is fixed
// by `count` (so repeatable), but it is not a sequential loop's.
constexpr std::size_t sum_of_squares_partials = 1024;
void sum_of_squares(const void* values, ElementFormat format, std::size_t count, double* partials,
                    double* result, cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
