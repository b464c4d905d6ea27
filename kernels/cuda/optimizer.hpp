#pragma once
// Optimizer steps on the GPU with the math of kernels/optimizer.hpp, bit for bit: every rounding is
// spelled out (no FMA contraction) as in the CPU loops.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cuda/precision.hpp"
#include "kernels/optimizer.hpp"

namespace zerolens::kernels::cuda {

enum class GradFormat { fp32, bf16, fp16 };

// One tensor of a fused Adam step: fp32 master weights and moments of `count` elements, the
// gradients (in the launch's GradFormat) and, unless nullptr, a 16-bit copy of the updated master
// weights (the compute parameters) written in the same pass.
struct AdamTensor {
  float* master = nullptr;
  const void* grads = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  std::uint16_t* half_copy = nullptr;
  std::size_t count = 0;
};

// Adam/AdamW (config.adam_w_mode) over all `tensors` at once, as apex's multi_tensor_apply does:
// a table of the tensors' pointers travels as a kernel argument and each block updates one chunk
// of one tensor, so a whole model takes one launch (or a few, past the table's capacity).
// Results equal kernels::adam_step's element by element. Throws std::invalid_argument when
// step < 1.
void adam_step_multi_tensor(std::span<const AdamTensor> tensors, GradFormat grad_format,
                            HalfFormat copy_format, const AdamConfig& config, std::int64_t step,
                            cudaStream_t stream);

// SGD as kernels::sgd_step (fp32 gradients), equal element by element.
void sgd_step(float* params, const float* grads, float* momentum_buffer, std::size_t count,
              const SgdConfig& config, cudaStream_t stream);

}  // namespace zerolens::kernels::cuda
