// Gpt2Model's backward pass: each layer adds its parameter gradients, turns the residual stream's
// gradient (dresidual) into that of its input, and frees its activations and its input.
#include <algorithm>

#include "exec/gpt2_state.hpp"
#include "kernels/cpu.hpp"

namespace zerolens::exec {

namespace kn = zerolens::kernels;

// The loss's gradient enters here, scaled by `scale` (1 / gradient accumulation, times a loss scale).
void Gpt2Model::State::head_backward(std::size_t layer, ParamViews p, GradViews g, float scale) {
  const std::size_t rows = dims.rows(), C = dims.channels, V = dims.vocab;
  dresidual = zeroed_working(rows * C);
  {
    // The loss gradient is fp32 (as the softmax); 16-bit training casts it down for the product.
    TrackedBuffer<float> dlogits = fp32(Component::ActivationWorking, rows * V);
    TrackedBuffer<float> dlosses = fp32(Component::ActivationWorking, rows);
    std::fill(dlosses.data(), dlosses.data() + rows, scale / float(rows));
    kn::crossentropy_softmax_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(), rows, V);
    TrackedBuffer<float> downcast;
    if (sixteen_bit()) {
      downcast = working(rows * V);
      std::copy_n(dlogits.data(), rows * V, downcast.data());
      dlogits.reset();
    }
    kn::matmul_backward(dresidual.data(), g[0].data(), nullptr, sixteen_bit() ? downcast.data() : dlogits.data(),
                        outputs[layer - 1].data(), p[0].data(), rows, C, V);
  }
  for (TrackedBuffer<float>* buffer : {&logits, &probs, &losses}) buffer->reset();
  targets.reset();
  outputs[layer - 1].reset();
}

void Gpt2Model::State::final_norm_backward(std::size_t layer, ParamViews p, GradViews g) {
  const std::size_t rows = dims.rows(), C = dims.channels;
  TrackedBuffer<float> dinput = zeroed_working(rows * C);
  kn::layernorm_backward(dinput.data(), g[0].data(), g[1].data(), dresidual.data(), outputs[layer - 1].data(),
                         p[0].data(), lnf_mean.data(), lnf_rstd.data(), rows, C);
  dresidual = std::move(dinput);
  lnf_mean.reset();
  lnf_rstd.reset();
  outputs[layer - 1].reset();
}

// out = mid + fc_out(gelu(fc_in(ln_2(mid)))), mid = x + o_proj(attention(qkv(ln_1(x)))): the
// residual gradient is updated in place, first to d(mid), then to d(x).
void Gpt2Model::State::block_backward(std::size_t layer, ParamViews p, GradViews g) {
  const Gpt2Dims& d = dims;
  const std::size_t rows = d.rows(), C = d.channels, F = d.ffn;
  BlockActivations& a = blocks[layer];
  {
    TrackedBuffer<float> dfch = zeroed_working(rows * F);
    kn::matmul_backward(dfch.data(), g[kFcOutWeight].data(), g[kFcOutBias].data(), dresidual.data(),
                        a.fch_gelu.data(), p[kFcOutWeight].data(), rows, F, C);
    kn::gelu_backward_inplace(dfch.data(), a.fch.data(), rows * F);
    TrackedBuffer<float> dln2 = zeroed_working(rows * C);
    kn::matmul_backward(dln2.data(), g[kFcInWeight].data(), g[kFcInBias].data(), dfch.data(), a.ln2.data(),
                        p[kFcInWeight].data(), rows, C, F);
    dfch.reset();
    kn::layernorm_backward(dresidual.data(), g[kLn2Weight].data(), g[kLn2Bias].data(), dln2.data(), a.mid.data(),
                           p[kLn2Weight].data(), a.ln2_mean.data(), a.ln2_rstd.data(), rows, C);
  }
  TrackedBuffer<float> dqkv = zeroed_working(rows * 3 * C);
  {
    TrackedBuffer<float> datty = zeroed_working(rows * C);
    kn::matmul_backward(datty.data(), g[kOWeight].data(), g[kOBias].data(), dresidual.data(), a.atty.data(),
                        p[kOWeight].data(), rows, C, C);
    TrackedBuffer<float> dscores = working(d.scores());
    kn::attention_backward(dqkv.data(), dscores.data(), datty.data(), a.qkv.data(), a.att.data(),
                           {d.batch, d.seq_len, C, d.heads});
  }
  TrackedBuffer<float> dln1 = zeroed_working(rows * C);
  TrackedBuffer<float> projection = working(rows * C);
  for (std::size_t k = 0; k < 3; ++k) {
    copy_from_fused(projection.data(), dqkv.data(), k, rows, C);
    kn::matmul_backward(dln1.data(), g[kQWeight + 2 * k].data(), g[kQBias + 2 * k].data(), projection.data(),
                        a.ln1.data(), p[kQWeight + 2 * k].data(), rows, C, C);
  }
  kn::layernorm_backward(dresidual.data(), g[kLn1Weight].data(), g[kLn1Bias].data(), dln1.data(),
                         outputs[layer - 1].data(), p[kLn1Weight].data(), a.ln1_mean.data(), a.ln1_rstd.data(), rows, C);
  a.release();
  outputs[layer - 1].reset();
}

void Gpt2Model::State::embedding_backward(GradViews g) {
  const Gpt2Dims& d = dims;
  kn::encoder_backward(g[0].data(), g[1].data(), dresidual.data(), tokens.data(), d.batch, d.seq_len, d.channels,
                       d.vocab);
  dresidual.reset();
  tokens.reset();
}

}  // namespace zerolens::exec
