// CudaGpt2Model's backward pass (exec/gpt2_backward.cpp's steps in the same order): each layer adds
// its parameter gradients, turns the residual stream's gradient (dresidual) into that of its input,
// and frees its activations and its input.
#include <vector>

#include "exec/cuda/gpt2_cuda_state.hpp"
#include "kernels/cuda/kernels.hpp"

namespace zerolens::exec {

namespace kc = zerolens::kernels::cuda;

// The loss's gradient enters here, scaled by `scale` (1 / gradient accumulation, times a loss scale).
void CudaGpt2Model::State::head_backward(std::size_t layer, ParamViews p, GradViews g, float scale) {
  const std::size_t rows = dims.rows(), C = dims.channels, V = dims.vocab;
  dresidual = zeroed_working(rows * C);
  {
    // The loss gradient is fp32 (as the softmax); 16-bit training casts it down for the product.
    HeldDeviceBuffer dlogits = fp32(Component::ActivationWorking, rows * V);
    HeldDeviceBuffer dlosses = fp32(Component::ActivationWorking, rows);
    dlosses.copy_from_host(std::vector<float>(rows, scale / float(rows)));
    kc::crossentropy_softmax_backward(dlogits.data(), dlosses.data(), probs.data(), targets.data(), rows, V, stream);
    HeldDeviceBuffer downcast;
    if (sixteen_bit()) {
      downcast = working(rows * V);
      copy_device(downcast.data(), dlogits.data(), rows * V, stream);
      dlogits.reset();
    }
    kc::matmul_backward(dresidual.data(), g[0].data(), nullptr, sixteen_bit() ? downcast.data() : dlogits.data(),
                        outputs[layer - 1].data(), p[0].data(), rows, C, V, handles(), stream);
  }
  for (HeldDeviceBuffer* buffer : {&logits, &probs, &losses}) buffer->reset();
  targets.reset();
  outputs[layer - 1].reset();
}

void CudaGpt2Model::State::final_norm_backward(std::size_t layer, ParamViews p, GradViews g) {
  const std::size_t rows = dims.rows(), C = dims.channels;
  HeldDeviceBuffer dinput = zeroed_working(rows * C);
  kc::layernorm_backward(dinput.data(), g[0].data(), g[1].data(), dresidual.data(), outputs[layer - 1].data(),
                         p[0].data(), lnf_mean.data(), lnf_rstd.data(), rows, C, stream);
  dresidual = std::move(dinput);
  lnf_mean.reset();
  lnf_rstd.reset();
  outputs[layer - 1].reset();
}

// out = mid + fc_out(gelu(fc_in(ln_2(mid)))), mid = x + o_proj(attention(qkv(ln_1(x)))): the
// residual gradient is updated in place, first to d(mid), then to d(x).
void CudaGpt2Model::State::block_backward(std::size_t layer, ParamViews p, GradViews g) {
  const Gpt2Dims& d = dims;
  const std::size_t rows = d.rows(), C = d.channels, F = d.ffn;
  CudaBlockActivations& a = blocks[layer];
  {
    HeldDeviceBuffer dfch = zeroed_working(rows * F);
    kc::matmul_backward(dfch.data(), g[kFcOutWeight].data(), g[kFcOutBias].data(), dresidual.data(),
                        a.fch_gelu.data(), p[kFcOutWeight].data(), rows, F, C, handles(), stream);
    kc::gelu_backward_inplace(dfch.data(), a.fch.data(), rows * F, stream);
    HeldDeviceBuffer dln2 = zeroed_working(rows * C);
    kc::matmul_backward(dln2.data(), g[kFcInWeight].data(), g[kFcInBias].data(), dfch.data(), a.ln2.data(),
                        p[kFcInWeight].data(), rows, C, F, handles(), stream);
    dfch.reset();
    kc::layernorm_backward(dresidual.data(), g[kLn2Weight].data(), g[kLn2Bias].data(), dln2.data(), a.mid.data(),
                           p[kLn2Weight].data(), a.ln2_mean.data(), a.ln2_rstd.data(), rows, C, stream);
  }
  HeldDeviceBuffer dqkv = zeroed_working(rows * 3 * C);
  {
    HeldDeviceBuffer datty = zeroed_working(rows * C);
    kc::matmul_backward(datty.data(), g[kOWeight].data(), g[kOBias].data(), dresidual.data(), a.atty.data(),
                        p[kOWeight].data(), rows, C, C, handles(), stream);
    HeldDeviceBuffer dscores = working(d.scores());
    kc::attention_backward(dqkv.data(), dscores.data(), datty.data(), a.qkv.data(), a.att.data(),
                           {d.batch, d.seq_len, C, d.heads}, handles(), stream);
  }
  HeldDeviceBuffer dln1 = zeroed_working(rows * C);
  HeldDeviceBuffer projection = working(rows * C);
  for (std::size_t k = 0; k < 3; ++k) {
    copy_from_fused(projection.data(), dqkv.data(), k, rows, C, stream);
    kc::matmul_backward(dln1.data(), g[kQWeight + 2 * k].data(), g[kQBias + 2 * k].data(), projection.data(),
                        a.ln1.data(), p[kQWeight + 2 * k].data(), rows, C, C, handles(), stream);
  }
  kc::layernorm_backward(dresidual.data(), g[kLn1Weight].data(), g[kLn1Bias].data(), dln1.data(),
                         outputs[layer - 1].data(), p[kLn1Weight].data(), a.ln1_mean.data(), a.ln1_rstd.data(), rows,
                         C, stream);
  a.release();
  outputs[layer - 1].reset();
}

void CudaGpt2Model::State::embedding_backward(GradViews g) {
  const Gpt2Dims& d = dims;
  kc::encoder_backward(g[0].data(), g[1].data(), dresidual.data(), tokens.data(), d.batch, d.seq_len, d.channels,
                       d.vocab, stream);
  dresidual.reset();
  tokens.reset();
}

}  // namespace zerolens::exec
