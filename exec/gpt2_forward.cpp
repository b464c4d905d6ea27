// Gpt2Model's forward pass, layer by layer, keeping what backward needs in ledger-tracked buffers.
#include <algorithm>
#include <numeric>

#include "exec/gpt2_state.hpp"
#include "kernels/cpu.hpp"

namespace zerolens::exec {

namespace kn = zerolens::kernels;

void BlockActivations::allocate(MemoryLedger& ledger, Component component, const Gpt2Dims& d, HeldAs held) {
  Gpt2BlockBuffers::allocate(
      d, [&](std::size_t count) { return TrackedBuffer<float>(ledger, Device::Gpu, component, count, held); },
      [&](std::size_t count) { return TrackedBuffer<float>(ledger, Device::Gpu, component, count); });
}

void Gpt2Model::State::embedding_forward(ParamViews p) {
  const Gpt2Dims& d = dims;
  outputs[0] = activation(Component::ActivationsStored, d.rows() * d.channels);
  kn::encoder_forward(outputs[0].data(), tokens.data(), p[0].data(), p[1].data(), d.batch, d.seq_len, d.channels,
                      d.vocab);
}

void copy_to_fused(float* fused, const float* part, std::size_t block, std::size_t rows, std::size_t width) {
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(part + r * width, width, fused + r * 3 * width + block * width);
}

void copy_from_fused(float* part, const float* fused, std::size_t block, std::size_t rows, std::size_t width) {
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(fused + r * 3 * width + block * width, width, part + r * width);
}

// With checkpointing the intermediates live only during this call (and again in recompute); the
// block output is the checkpoint the next block starts from.
void Gpt2Model::State::block_forward(std::size_t layer, ParamViews p, bool recomputing) {
  const Gpt2Dims& d = dims;
  const std::size_t rows = d.rows(), C = d.channels, F = d.ffn;
  const float* x = outputs[layer - 1].data();
  BlockActivations& a = blocks[layer];
  const bool checkpointing = options.checkpointing;
  a.allocate(ledger, checkpointing ? Component::ActivationWorking : Component::ActivationsStored, d, held());
  kn::layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p[kLn1Weight].data(),
                        p[kLn1Bias].data(), rows, C);
  {
    TrackedBuffer<float> projection = working(rows * C);
    for (std::size_t k = 0; k < 3; ++k) {
      kn::matmul_forward(projection.data(), a.ln1.data(), p[kQWeight + 2 * k].data(), p[kQBias + 2 * k].data(),
                         rows, C, C);
      copy_to_fused(a.qkv.data(), projection.data(), k, rows, C);
    }
  }
  {
    TrackedBuffer<float> preatt = working(d.scores());
    kn::attention_forward(a.atty.data(), preatt.data(), a.att.data(), a.qkv.data(), {d.batch, d.seq_len, C, d.heads});
  }
  kn::matmul_forward(a.mid.data(), a.atty.data(), p[kOWeight].data(), p[kOBias].data(), rows, C, C);
  kn::residual_forward(a.mid.data(), a.mid.data(), x, rows * C);
  kn::layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(), p[kLn2Weight].data(),
                        p[kLn2Bias].data(), rows, C);
  kn::matmul_forward(a.fch.data(), a.ln2.data(), p[kFcInWeight].data(), p[kFcInBias].data(), rows, C, F);
  kn::gelu_forward(a.fch_gelu.data(), a.fch.data(), rows * F);
  if (recomputing) return;  // the output (the next block's checkpoint) still exists
  TrackedBuffer<float>& out = outputs[layer];
  out = activation(checkpointing ? Component::ActivationCheckpoints : Component::ActivationsStored, rows * C);
  kn::matmul_forward(out.data(), a.fch_gelu.data(), p[kFcOutWeight].data(), p[kFcOutBias].data(), rows, F, C);
  kn::residual_forward(out.data(), out.data(), a.mid.data(), rows * C);
  if (checkpointing) a.release();
}

void Gpt2Model::State::final_norm_forward(std::size_t layer, ParamViews p) {
  const std::size_t rows = dims.rows(), C = dims.channels;
  outputs[layer] = activation(Component::ActivationsStored, rows * C);
  lnf_mean = fp32(Component::ActivationsStored, rows);
  lnf_rstd = fp32(Component::ActivationsStored, rows);
  kn::layernorm_forward(outputs[layer].data(), lnf_mean.data(), lnf_rstd.data(), outputs[layer - 1].data(),
                        p[0].data(), p[1].data(), rows, C);
}

// The LM head multiplies by the token embedding (tied): logits = x · wteᵀ, then the mean
// cross-entropy of the next tokens. The softmax and the losses are fp32 in any precision; 16-bit
// logits are first copied to fp32 for them.
void Gpt2Model::State::head_forward(ParamViews p) {
  const std::size_t rows = dims.rows(), C = dims.channels, V = dims.vocab;
  const std::size_t layer = model.layers.size() - 1;
  logits = activation(Component::ActivationsStored, rows * V);
  probs = fp32(Component::ActivationsStored, rows * V);
  losses = fp32(Component::ActivationsStored, rows);
  kn::matmul_forward(logits.data(), outputs[layer - 1].data(), p[0].data(), nullptr, rows, C, V);
  TrackedBuffer<float> upcast;
  if (sixteen_bit()) {
    upcast = fp32(Component::ActivationWorking, rows * V);
    std::copy_n(logits.data(), rows * V, upcast.data());
  }
  kn::crossentropy_softmax_forward(losses.data(), probs.data(), sixteen_bit() ? upcast.data() : logits.data(),
                                   targets.data(), rows, V);
  double sum = 0;
  for (std::size_t r = 0; r < rows; ++r) sum += losses[r];
  loss = sum / double(rows);
}

}  // namespace zerolens::exec
