// Fused multi-tensor Adam/AdamW and SGD. __f*_rn intrinsics fix each rounding so the results match
// the CPU optimizer (compiled without FMA contraction) bit for bit.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/optimizer.hpp"
#include "kernels/cuda/runtime.hpp"

namespace zerolens::kernels::cuda {

namespace {

// The table of one launch, passed by value as a kernel argument (kept under the classic 4 KiB
// parameter limit). Block b updates chunk chunk_of_block[b] of tensor tensor_of_block[b].
constexpr int max_tensors = 24;
constexpr int max_blocks = 384;
constexpr std::size_t chunk_size = 65536;  // elements; a multiple of 4 keeps chunks 16-byte aligned
constexpr unsigned block_size = 512;

struct AdamTable {
  float* master[max_tensors];
  const void* grads[max_tensors];
  float* m[max_tensors];
  float* v[max_tensors];
  std::uint16_t* copy[max_tensors];
  std::size_t count[max_tensors];
  std::uint32_t vector_ok;  // bit t: tensor t's pointers allow 4-element vector accesses
  std::uint8_t tensor_of_block[max_blocks];
  std::uint32_t chunk_of_block[max_blocks];
};
static_assert(sizeof(AdamTable) + sizeof(AdamScalars) <= 4096);

template <bool decoupled>
__device__ inline float adam_element(float p, float g, float& m, float& v, const AdamScalars& s) {
  if constexpr (!decoupled) g = __fadd_rn(g, __fmul_rn(s.decay, p));
  m = __fadd_rn(__fmul_rn(s.beta1, m), __fmul_rn(s.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(s.beta2, v), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  const float update =
      __fdiv_rn(__fmul_rn(s.step_size, m),
                __fadd_rn(__fmul_rn(__fsqrt_rn(v), s.inverse_sqrt_correction2), s.eps));
  return decoupled ? __fsub_rn(p, __fadd_rn(update, __fmul_rn(s.lr_decay, p)))
                   : __fsub_rn(p, update);
}

template <GradFormat format>
__device__ inline float load_grad(const void* grads, std::size_t i) {
  if constexpr (format == GradFormat::fp32)
    return static_cast<const float*>(grads)[i];
  else if constexpr (format == GradFormat::bf16)
    return device::bf16_bits_to_float(static_cast<const std::uint16_t*>(grads)[i]);
  else
    return device::fp16_bits_to_float(static_cast<const std::uint16_t*>(grads)[i]);
}

// Four consecutive gradients with one 16-byte (fp32) or 8-byte (16-bit) load.
template <GradFormat format>
__device__ inline float4 load_grad4(const void* grads, std::size_t i) {
  if constexpr (format == GradFormat::fp32) {
    return reinterpret_cast<const float4*>(static_cast<const float*>(grads) + i)[0];
  } else {
    const uint2 bits =
        reinterpret_cast<const uint2*>(static_cast<const std::uint16_t*>(grads) + i)[0];
    constexpr bool bf16 = format == GradFormat::bf16;
    const auto to_float = [](unsigned half) {
      return bf16 ? device::bf16_bits_to_float(std::uint16_t(half))
                  : device::fp16_bits_to_float(std::uint16_t(half));
    };
    return make_float4(to_float(bits.x & 0xFFFFu), to_float(bits.x >> 16),
                       to_float(bits.y & 0xFFFFu), to_float(bits.y >> 16));
  }
}

template <GradFormat grad_format, HalfFormat copy_format, bool decoupled>
__global__ void __launch_bounds__(block_size)
    adam_multi_tensor_kernel(AdamTable table, AdamScalars s) {
  const unsigned t = table.tensor_of_block[blockIdx.x];
  const std::size_t begin = std::size_t(table.chunk_of_block[blockIdx.x]) * chunk_size;
  const std::size_t n = min(chunk_size, table.count[t] - begin);
  float* master = table.master[t] + begin;
  float* m = table.m[t] + begin;
  float* v = table.v[t] + begin;
  const void* grads =
      grad_format == GradFormat::fp32
          ? static_cast<const void*>(static_cast<const float*>(table.grads[t]) + begin)
          : static_cast<const void*>(static_cast<const std::uint16_t*>(table.grads[t]) + begin);
  std::uint16_t* copy = table.copy[t] ? table.copy[t] + begin : nullptr;

  std::size_t vector_end = 0;
  if (table.vector_ok & (1u << t)) {
    vector_end = n / 4 * 4;
    for (std::size_t i = 4 * std::size_t(threadIdx.x); i < vector_end;
         i += 4 * std::size_t(blockDim.x)) {
      float4 p = reinterpret_cast<float4*>(master + i)[0];
      float4 mm = reinterpret_cast<float4*>(m + i)[0];
      float4 vv = reinterpret_cast<float4*>(v + i)[0];
      const float4 g = load_grad4<grad_format>(grads, i);
      p.x = adam_element<decoupled>(p.x, g.x, mm.x, vv.x, s);
      p.y = adam_element<decoupled>(p.y, g.y, mm.y, vv.y, s);
      p.z = adam_element<decoupled>(p.z, g.z, mm.z, vv.z, s);
      p.w = adam_element<decoupled>(p.w, g.w, mm.w, vv.w, s);
      reinterpret_cast<float4*>(master + i)[0] = p;
      reinterpret_cast<float4*>(m + i)[0] = mm;
      reinterpret_cast<float4*>(v + i)[0] = vv;
      if (copy) {
        const auto h = [](float x) { return unsigned(device::float_to_half_bits<copy_format>(x)); };
        reinterpret_cast<uint2*>(copy + i)[0] =
            make_uint2(h(p.x) | h(p.y) << 16, h(p.z) | h(p.w) << 16);
      }
    }
  }
  for (std::size_t i = vector_end + threadIdx.x; i < n; i += blockDim.x) {
    const float p =
        adam_element<decoupled>(master[i], load_grad<grad_format>(grads, i), m[i], v[i], s);
    master[i] = p;
    if (copy) copy[i] = device::float_to_half_bits<copy_format>(p);
  }
}

template <GradFormat grad_format, HalfFormat copy_format>
void launch_adam(const AdamTable& table, int blocks, const AdamScalars& s, bool decoupled,
                 cudaStream_t stream) {
  if (decoupled)
    adam_multi_tensor_kernel<grad_format, copy_format, true>
        <<<blocks, block_size, 0, stream>>>(table, s);
  else
    adam_multi_tensor_kernel<grad_format, copy_format, false>
        <<<blocks, block_size, 0, stream>>>(table, s);
  check_launch("adam_multi_tensor_kernel");
}

template <GradFormat grad_format>
void launch_adam(const AdamTable& table, int blocks, const AdamScalars& s, bool decoupled,
                 HalfFormat copy_format, cudaStream_t stream) {
  if (copy_format == HalfFormat::bf16)
    launch_adam<grad_format, HalfFormat::bf16>(table, blocks, s, decoupled, stream);
  else
    launch_adam<grad_format, HalfFormat::fp16>(table, blocks, s, decoupled, stream);
}

bool aligned(const void* pointer, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(pointer) % bytes == 0;
}

template <bool with_momentum>
__global__ void sgd_kernel(float* params, const float* grads, float* buffer, std::size_t count,
                           float lr, float momentum, float decay) {
  for (std::size_t i = device::global_index(); i < count; i += device::global_stride()) {
    float g = __fadd_rn(grads[i], __fmul_rn(decay, params[i]));
    if constexpr (with_momentum) g = buffer[i] = __fadd_rn(__fmul_rn(momentum, buffer[i]), g);
    params[i] = __fsub_rn(params[i], __fmul_rn(lr, g));
  }
}

}  // namespace

void adam_step_multi_tensor(std::span<const AdamTensor> tensors, GradFormat grad_format,
                            HalfFormat copy_format, const AdamConfig& config, std::int64_t step,
                            cudaStream_t stream) {
  if (step < 1) throw std::invalid_argument("adam_step_multi_tensor: step counts from 1");
  const AdamScalars scalars = adam_scalars(config, step);
  const std::size_t grad_bytes = grad_format == GradFormat::fp32 ? 4 : 2;
  const auto launch = [&](const AdamTable& table, int blocks) {
    switch (grad_format) {
      case GradFormat::fp32:
        return launch_adam<GradFormat::fp32>(table, blocks, scalars, config.adam_w_mode,
                                             copy_format, stream);
      case GradFormat::bf16:
        return launch_adam<GradFormat::bf16>(table, blocks, scalars, config.adam_w_mode,
                                             copy_format, stream);
      case GradFormat::fp16:
        return launch_adam<GradFormat::fp16>(table, blocks, scalars, config.adam_w_mode,
                                             copy_format, stream);
    }
  };

  AdamTable table{};
  int tensors_in_table = 0, blocks = 0;
  for (const AdamTensor& tensor : tensors) {
    if (tensor.count == 0) continue;
    int slot = tensors_in_table++;
    const auto set_slot = [&](int at) {
      table.master[at] = tensor.master;
      table.grads[at] = tensor.grads;
      table.m[at] = tensor.exp_avg;
      table.v[at] = tensor.exp_avg_sq;
      table.copy[at] = tensor.half_copy;
      table.count[at] = tensor.count;
      const bool vector_ok = aligned(tensor.master, 16) && aligned(tensor.exp_avg, 16) &&
                             aligned(tensor.exp_avg_sq, 16) &&
                             aligned(tensor.grads, 4 * grad_bytes) && aligned(tensor.half_copy, 8);
      table.vector_ok = (table.vector_ok & ~(1u << at)) | (vector_ok ? 1u << at : 0u);
    };
    set_slot(slot);
    const std::size_t chunks = (tensor.count + chunk_size - 1) / chunk_size;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      table.tensor_of_block[blocks] = std::uint8_t(slot);
      table.chunk_of_block[blocks] = std::uint32_t(chunk);
      ++blocks;
      const bool tensor_done = chunk + 1 == chunks;
      if (blocks == max_blocks || (tensor_done && tensors_in_table == max_tensors)) {
        launch(table, blocks);
        blocks = 0;
        tensors_in_table = 0;
        if (!tensor_done) {  // the tensor goes on in the next launch, from slot 0
          slot = tensors_in_table++;
          set_slot(slot);
        }
      }
    }
  }
  if (blocks > 0) launch(table, blocks);
}

void sgd_step(float* params, const float* grads, float* momentum_buffer, std::size_t count,
              const SgdConfig& config, cudaStream_t stream) {
  const auto lr = float(config.lr), momentum = float(config.momentum),
             decay = float(config.weight_decay);
  if (momentum > 0.0f && momentum_buffer == nullptr)
    throw std::invalid_argument("sgd_step: momentum needs a momentum buffer");
  if (count == 0) return;
  constexpr unsigned block = 256;
  const unsigned grid = grid_for(count, block);
  if (momentum > 0.0f)
    sgd_kernel<true>
        <<<grid, block, 0, stream>>>(params, grads, momentum_buffer, count, lr, momentum, decay);
  else
    sgd_kernel<false>
        <<<grid, block, 0, stream>>>(params, grads, nullptr, count, lr, momentum, decay);
  check_launch("sgd_kernel");
}

}  // namespace zerolens::kernels::cuda
