#pragma once
// GPT-2's layer steps, written once over a backend: the forward and backward of the embedding, the
// blocks (LayerNorm, attention, MLP), the final LayerNorm and the head's loss, with the activations
// they keep, allocated and freed in one order. Gpt2Model runs them on the CPU kernels
// (CpuGpt2Backend, exec/model/gpt2_model.cpp), CudaGpt2Model on the GPU's (CudaGpt2Backend,
// exec/cuda/gpt2_cuda_backend.hpp), so both charge the ledger alike and compute the same maths.
//
// A Backend is what differs between them, its buffers and its kernel calls:
//   Buffer, Tokens: move-only float and int32 buffers charged to the ledger, zero-filled on
//     allocation, with data(), size() and reset();
//   kModelName: the model's name in error messages;
//   Backend(MemoryLedger&); buffer(component, count, held), tokens(count);
//   upload(tokens, host), fill(buffer, value), to_host(buffer), copy(to, from, count),
//   copy_to_fused / copy_from_fused(fused, part, block, rows, width) (see
//   Gpt2Layers::block_forward); the kernels of kernels/cpu.hpp by name, with their CPU arguments
//   (the CUDA backend adds its stream and cuBLAS handles), so the steps read as the CPU maths and
//   the CUDA calls stay direct.
// Templates, instantiated in the two models' .cpp files only: nothing here costs a call on the GPU
// path.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "exec/memory/memory_ledger.hpp"
#include "exec/model/gpt2_shape.hpp"
#include "exec/model/layer_model.hpp"
#include "kernels/attention.hpp"
#include "sim/model/model.hpp"

namespace zerolens::exec {

// What a block keeps for backward besides its input (the previous layer's output).
template <typename Buffer>
struct Gpt2BlockBuffers {
  Buffer ln1, ln1_mean, ln1_rstd, qkv, att, atty, mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;

  // make(count): a buffer held at the activation dtype; fp32(count): 4 bytes per element (LayerNorm
  // statistics stay fp32 in any precision, as in mixed-precision LayerNorm kernels).
  template <typename Make, typename Fp32>
  void allocate(const Gpt2Dims& d, Make make, Fp32 fp32) {
    const std::size_t rows = d.rows(), C = d.channels, F = d.ffn;
    ln1 = make(rows * C);
    ln1_mean = fp32(rows);
    ln1_rstd = fp32(rows);
    qkv = make(rows * 3 * C);
    att = make(d.scores());
    atty = make(rows * C);
    mid = make(rows * C);
    ln2 = make(rows * C);
    ln2_mean = fp32(rows);
    ln2_rstd = fp32(rows);
    fch = make(rows * F);
    fch_gelu = make(rows * F);
  }
  void release() {
    for (Buffer* buffer : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &att, &atty, &mid, &ln2, &ln2_mean,
                           &ln2_rstd, &fch, &fch_gelu}) {
      buffer->reset();
    }
  }
};

// The layer dispatch, the batch and each role's steps; the models' State.
template <typename Backend>
struct Gpt2Layers {
  using Buffer = typename Backend::Buffer;

  // `layout`: gpt2_layout's, computed first so that a refused description never reaches the
  // backend.
  Gpt2Layers(const Model& model_, const Gpt2Options& options_, MemoryLedger& ledger,
             Gpt2Layout layout)
      : model(model_),
        options(options_),
        dims(layout.dims),
        roles(std::move(layout.roles)),
        corpus(options_.seed, std::int64_t(dims.vocab)),
        backend(ledger) {
    outputs.resize(model.layers.size());
    blocks.resize(model.layers.size());
  }

  void load_batch(std::int64_t first_sample, std::int64_t count) {
    if (std::size_t(count) != dims.batch) {
      throw std::logic_error(std::string(Backend::kModelName) +
                             ": micro-batch differs from the plan's");
    }
    std::vector<std::int32_t> host_tokens(dims.rows()), host_targets(dims.rows());
    corpus.fill_batch(first_sample, dims.batch, dims.seq_len, host_tokens, host_targets);
    tokens = backend.tokens(dims.rows());
    targets = backend.tokens(dims.rows());
    backend.upload(tokens, host_tokens);
    backend.upload(targets, host_targets);
  }

  void forward(std::size_t layer, ParamViews params) {
    switch (roles[layer]) {
      case Gpt2Role::Embedding:
        return embedding_forward(params);
      case Gpt2Role::Block:
        return block_forward(layer, params, false);
      case Gpt2Role::FinalNorm:
        return final_norm_forward(layer, params);
      case Gpt2Role::Head:
        return head_forward(params);
    }
  }

  void recompute(std::size_t layer, ParamViews params) {
    if (roles[layer] != Gpt2Role::Block)
      throw std::logic_error("GPT-2: only blocks are checkpointed");
    block_forward(layer, params, true);
  }

  void backward(std::size_t layer, ParamViews params, GradViews grads, float scale) {
    switch (roles[layer]) {
      case Gpt2Role::Embedding:
        return embedding_backward(grads);
      case Gpt2Role::Block:
        return block_backward(layer, params, grads);
      case Gpt2Role::FinalNorm:
        return final_norm_backward(layer, params, grads);
      case Gpt2Role::Head:
        return head_backward(layer, params, grads, scale);
    }
  }

  // An activation (counted at the plan's activation dtype) and an fp32 buffer in any precision.
  Buffer activation(Component component, std::size_t count) {
    return backend.buffer(component, count, held());
  }
  Buffer fp32(Component component, std::size_t count) {
    return backend.buffer(component, count, HeldAs{4});
  }
  Buffer working(std::size_t count) { return activation(Component::ActivationWorking, count); }
  // For the gradients backward kernels accumulate into: a backend's buffers start zeroed.
  Buffer zeroed_working(std::size_t count) { return working(count); }
  HeldAs held() const { return {std::size_t(options.activation_element_bytes)}; }
  bool sixteen_bit() const { return options.activation_element_bytes < 4; }

  void embedding_forward(ParamViews p) {
    const Gpt2Dims& d = dims;
    outputs[0] = activation(Component::ActivationsStored, d.rows() * d.channels);
    backend.encoder_forward(outputs[0].data(), tokens.data(), p[0].data(), p[1].data(), d.batch,
                            d.seq_len, d.channels, d.vocab);
  }

  // With checkpointing the intermediates live only during this call (and again in recompute); the
  // block output is the checkpoint the next block starts from. The attention kernel wants q, k and
  // v fused ([rows, 3 x C]); sim's model has three projections, so each is copied into its column
  // block.
  void block_forward(std::size_t layer, ParamViews p, bool recomputing) {
    const Gpt2Dims& d = dims;
    const std::size_t rows = d.rows(), C = d.channels, F = d.ffn;
    const float* x = outputs[layer - 1].data();
    Gpt2BlockBuffers<Buffer>& a = blocks[layer];
    const bool checkpointing = options.checkpointing;
    const Component component =
        checkpointing ? Component::ActivationWorking : Component::ActivationsStored;
    a.allocate(
        d, [&](std::size_t count) { return backend.buffer(component, count, held()); },
        [&](std::size_t count) { return backend.buffer(component, count, HeldAs{4}); });
    backend.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x,
                              p[kLn1Weight].data(), p[kLn1Bias].data(), rows, C);
    {
      Buffer projection = working(rows * C);
      for (std::size_t k = 0; k < 3; ++k) {
        backend.matmul_forward(projection.data(), a.ln1.data(), p[kQWeight + 2 * k].data(),
                               p[kQBias + 2 * k].data(), rows, C, C);
        backend.copy_to_fused(a.qkv.data(), projection.data(), k, rows, C);
      }
    }
    {
      Buffer preatt = working(d.scores());
      backend.attention_forward(a.atty.data(), preatt.data(), a.att.data(), a.qkv.data(),
                                kernels::AttentionShape{d.batch, d.seq_len, C, d.heads});
    }
    backend.matmul_forward(a.mid.data(), a.atty.data(), p[kOWeight].data(), p[kOBias].data(), rows,
                           C, C);
    backend.residual_forward(a.mid.data(), a.mid.data(), x, rows * C);
    backend.layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(),
                              p[kLn2Weight].data(), p[kLn2Bias].data(), rows, C);
    backend.matmul_forward(a.fch.data(), a.ln2.data(), p[kFcInWeight].data(), p[kFcInBias].data(),
                           rows, C, F);
    backend.gelu_forward(a.fch_gelu.data(), a.fch.data(), rows * F);
    if (recomputing) return;  // the output (the next block's checkpoint) still exists
    Buffer& out = outputs[layer];
    out = activation(
        checkpointing ? Component::ActivationCheckpoints : Component::ActivationsStored, rows * C);
    backend.matmul_forward(out.data(), a.fch_gelu.data(), p[kFcOutWeight].data(),
                           p[kFcOutBias].data(), rows, F, C);
    backend.residual_forward(out.data(), out.data(), a.mid.data(), rows * C);
    if (checkpointing) a.release();
  }

  void final_norm_forward(std::size_t layer, ParamViews p) {
    const std::size_t rows = dims.rows(), C = dims.channels;
    outputs[layer] = activation(Component::ActivationsStored, rows * C);
    lnf_mean = fp32(Component::ActivationsStored, rows);
    lnf_rstd = fp32(Component::ActivationsStored, rows);
    backend.layernorm_forward(outputs[layer].data(), lnf_mean.data(), lnf_rstd.data(),
                              outputs[layer - 1].data(), p[0].data(), p[1].data(), rows, C);
  }

  // The LM head multiplies by the token embedding (tied): logits = x · wteᵀ, then the mean
  // cross-entropy of the next tokens. The softmax and the losses are fp32 in any precision; 16-bit
  // logits are first copied to fp32 for them. The per-row losses are averaged in double on the
  // host.
  void head_forward(ParamViews p) {
    const std::size_t rows = dims.rows(), C = dims.channels, V = dims.vocab;
    const std::size_t layer = model.layers.size() - 1;
    logits = activation(Component::ActivationsStored, rows * V);
    probs = fp32(Component::ActivationsStored, rows * V);
    losses = fp32(Component::ActivationsStored, rows);
    backend.matmul_forward(logits.data(), outputs[layer - 1].data(), p[0].data(), nullptr, rows, C,
                           V);
    Buffer upcast;
    if (sixteen_bit()) {
      upcast = fp32(Component::ActivationWorking, rows * V);
      backend.copy(upcast.data(), logits.data(), rows * V);
    }
    backend.crossentropy_softmax_forward(losses.data(), probs.data(),
                                         sixteen_bit() ? upcast.data() : logits.data(),
                                         targets.data(), rows, V);
    const std::vector<float> host = backend.to_host(losses);
    double sum = 0;
    for (std::size_t r = 0; r < rows; ++r) sum += host[r];
    loss = sum / double(rows);
  }

  // Backward: each layer adds its parameter gradients, turns the residual stream's gradient
  // (dresidual) into that of its input, and frees its activations and its input.

  // The loss's gradient enters here, scaled by `scale` (1 / gradient accumulation, times a loss
  // scale).
  void head_backward(std::size_t layer, ParamViews p, GradViews g, float scale) {
    const std::size_t rows = dims.rows(), C = dims.channels, V = dims.vocab;
    dresidual = zeroed_working(rows * C);
    {
      // The loss gradient is fp32 (as the softmax); 16-bit training casts it down for the product.
      Buffer dlogits = fp32(Component::ActivationWorking, rows * V);
      Buffer dlosses = fp32(Component::ActivationWorking, rows);
      backend.fill(dlosses, scale / float(rows));
      backend.crossentropy_softmax_backward(dlogits.data(), dlosses.data(), probs.data(),
                                            targets.data(), rows, V);
      Buffer downcast;
      if (sixteen_bit()) {
        downcast = working(rows * V);
        backend.copy(downcast.data(), dlogits.data(), rows * V);
        dlogits.reset();
      }
      backend.matmul_backward(dresidual.data(), g[0].data(), nullptr,
                              sixteen_bit() ? downcast.data() : dlogits.data(),
                              outputs[layer - 1].data(), p[0].data(), rows, C, V);
    }
    for (Buffer* buffer : {&logits, &probs, &losses}) buffer->reset();
    targets.reset();
    outputs[layer - 1].reset();
  }

  void final_norm_backward(std::size_t layer, ParamViews p, GradViews g) {
    const std::size_t rows = dims.rows(), C = dims.channels;
    Buffer dinput = zeroed_working(rows * C);
    backend.layernorm_backward(dinput.data(), g[0].data(), g[1].data(), dresidual.data(),
                               outputs[layer - 1].data(), p[0].data(), lnf_mean.data(),
                               lnf_rstd.data(), rows, C);
    dresidual = std::move(dinput);
    lnf_mean.reset();
    lnf_rstd.reset();
    outputs[layer - 1].reset();
  }

  // out = mid + fc_out(gelu(fc_in(ln_2(mid)))), mid = x + o_proj(attention(qkv(ln_1(x)))): the
  // residual gradient is updated in place, first to d(mid), then to d(x).
  void block_backward(std::size_t layer, ParamViews p, GradViews g) {
    const Gpt2Dims& d = dims;
    const std::size_t rows = d.rows(), C = d.channels, F = d.ffn;
    Gpt2BlockBuffers<Buffer>& a = blocks[layer];
    {
      Buffer dfch = zeroed_working(rows * F);
      backend.matmul_backward(dfch.data(), g[kFcOutWeight].data(), g[kFcOutBias].data(),
                              dresidual.data(), a.fch_gelu.data(), p[kFcOutWeight].data(), rows, F,
                              C);
      backend.gelu_backward_inplace(dfch.data(), a.fch.data(), rows * F);
      Buffer dln2 = zeroed_working(rows * C);
      backend.matmul_backward(dln2.data(), g[kFcInWeight].data(), g[kFcInBias].data(), dfch.data(),
                              a.ln2.data(), p[kFcInWeight].data(), rows, C, F);
      dfch.reset();
      backend.layernorm_backward(dresidual.data(), g[kLn2Weight].data(), g[kLn2Bias].data(),
                                 dln2.data(), a.mid.data(), p[kLn2Weight].data(), a.ln2_mean.data(),
                                 a.ln2_rstd.data(), rows, C);
    }
    Buffer dqkv = zeroed_working(rows * 3 * C);
    {
      Buffer datty = zeroed_working(rows * C);
      backend.matmul_backward(datty.data(), g[kOWeight].data(), g[kOBias].data(), dresidual.data(),
                              a.atty.data(), p[kOWeight].data(), rows, C, C);
      Buffer dscores = working(d.scores());
      backend.attention_backward(dqkv.data(), dscores.data(), datty.data(), a.qkv.data(),
                                 a.att.data(),
                                 kernels::AttentionShape{d.batch, d.seq_len, C, d.heads});
    }
    Buffer dln1 = zeroed_working(rows * C);
    Buffer projection = working(rows * C);
    for (std::size_t k = 0; k < 3; ++k) {
      backend.copy_from_fused(projection.data(), dqkv.data(), k, rows, C);
      backend.matmul_backward(dln1.data(), g[kQWeight + 2 * k].data(), g[kQBias + 2 * k].data(),
                              projection.data(), a.ln1.data(), p[kQWeight + 2 * k].data(), rows, C,
                              C);
    }
    backend.layernorm_backward(dresidual.data(), g[kLn1Weight].data(), g[kLn1Bias].data(),
                               dln1.data(), outputs[layer - 1].data(), p[kLn1Weight].data(),
                               a.ln1_mean.data(), a.ln1_rstd.data(), rows, C);
    a.release();
    outputs[layer - 1].reset();
  }

  void embedding_backward(GradViews g) {
    const Gpt2Dims& d = dims;
    backend.encoder_backward(g[0].data(), g[1].data(), dresidual.data(), tokens.data(), d.batch,
                             d.seq_len, d.channels, d.vocab);
    dresidual.reset();
    tokens.reset();
  }

  const Model& model;
  Gpt2Options options;
  Gpt2Dims dims;
  std::vector<Gpt2Role> roles;
  Gpt2Corpus corpus;
  Backend
      backend;  // before the buffers, so it outlives them (the CUDA one owns the cuBLAS handles)
  typename Backend::Tokens tokens, targets;      // kept by the embedding and the head
  std::vector<Buffer> outputs;                   // per layer: its output [rows, C] (not the head's)
  std::vector<Gpt2BlockBuffers<Buffer>> blocks;  // per layer (used by blocks only)
  Buffer lnf_mean, lnf_rstd;
  Buffer logits, probs, losses;  // the head's
  Buffer dresidual;              // gradient of the residual stream during backward
  double loss = 0;
};

}  // namespace zerolens::exec
