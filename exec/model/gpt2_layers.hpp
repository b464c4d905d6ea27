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
// Tensor parallelism (Megatron's layout, docs/parallelism.md): a rank holds heads / t of the
// attention (column-split q/k/v), in / t columns of the row-split o_proj and fc_out (their bias
// added after the group's sum), f / t of the MLP and V'/t rows of the vocabulary; the layers issue
// the group's collectives through a TensorParallelChannel where the maths needs them. A backend
// with kTensorParallel false (CUDA's) compiles none of it.
// Templates, instantiated in the two models' .cpp files only: nothing here costs a call on the GPU
// path.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "exec/memory/memory_ledger.hpp"
#include "exec/model/gpt2_shape.hpp"
#include "exec/model/layer_model.hpp"
#include "exec/model/moe_layer.hpp"
#include "exec/model/tensor_parallel_channel.hpp"
#include "kernels/attention.hpp"
#include "sim/model/model.hpp"

namespace zerolens::exec {

// What a block keeps for backward besides its input (the previous layer's output).
template <typename Buffer>
struct Gpt2BlockBuffers {
  Buffer ln1, ln1_mean, ln1_rstd, qkv, att, atty, mid, ln2, ln2_mean, ln2_rstd, fch, fch_gelu;

  // make(count): a buffer held at the activation dtype; fp32(count): 4 bytes per element (LayerNorm
  // statistics stay fp32 in any precision, as in mixed-precision LayerNorm kernels).
  // The residual stream's buffers (norm outputs and statistics, mid) hold this rank's stream rows;
  // those inside the parallel regions its heads' and MLP columns of every row.
  // A MoE block (dense_mlp false) has no fc_in outputs: its experts keep their own.
  template <typename Make, typename Fp32>
  void allocate(const Gpt2Dims& d, Make make, Fp32 fp32, bool dense_mlp = true) {
    const std::size_t rows = d.rows(), here = d.stream_rows(), C = d.channels, W = d.width_here(),
                      F = d.ffn_here();
    ln1 = make(here * C);
    ln1_mean = fp32(here);
    ln1_rstd = fp32(here);
    qkv = make(rows * 3 * W);
    att = make(d.scores());
    atty = make(rows * W);
    mid = make(here * C);
    ln2 = make(here * C);
    ln2_mean = fp32(here);
    ln2_rstd = fp32(here);
    if (!dense_mlp) return;
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

// Whether a backend runs MoE blocks (the CPU one: ExpertParallelMoe on host buffers).
template <typename Backend>
constexpr bool kRunsMixtureOfExperts = requires {
  requires Backend::kMixtureOfExperts;
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
        roles(runnable_roles(model_, std::move(layout.roles))),
        corpus(options_.seed, std::int64_t(dims.vocab)),
        backend(ledger),
        moe_ledger(&ledger) {
    moes.resize(model.layers.size());
    outputs.resize(model.layers.size());
    chunk_inputs.resize(model.layers.size());
    blocks.resize(model.layers.size());
    chunk_first.assign(model.layers.size(), false);
    for (const PipelineChunk& chunk : model.pipeline_chunks) {
      if (chunk.global_index > 0 && chunk.first < chunk.end) chunk_first[chunk.first] = true;
    }
  }

  // A backend without MoE blocks refuses a model with them before it is constructed (no CUDA
  // call).
  static std::vector<Gpt2Role> runnable_roles(const Model& model, std::vector<Gpt2Role> roles) {
    if constexpr (!kRunsMixtureOfExperts<Backend>)
      refuse_mixture_of_experts(model, Backend::kModelName);
    return roles;
  }

  void load_batch(std::int64_t first_sample, std::int64_t count) {
    if (std::size_t(count) != dims.batch) {
      throw std::logic_error(std::string(Backend::kModelName) +
                             ": micro-batch differs from the plan's");
    }
    std::vector<std::int32_t> host_tokens(dims.rows()), host_targets(dims.rows());
    corpus.fill_batch(first_sample, dims.batch, dims.seq_len, host_tokens, host_targets);
    // A pipeline stage keeps what its layers read: the embedding's tokens, the head's targets.
    const auto has = [&](Gpt2Role role) {
      return std::find(roles.begin(), roles.end(), role) != roles.end();
    };
    if (has(Gpt2Role::Embedding)) {
      tokens = backend.tokens(dims.rows());
      backend.upload(tokens, host_tokens);
    }
    if (has(Gpt2Role::Head)) {
      targets = backend.tokens(dims.rows());
      backend.upload(targets, host_targets);
    }
  }

  void forward(std::size_t layer, ParamViews params) {
    switch (roles[layer]) {
      case Gpt2Role::Embedding:
        return embedding_forward(params);
      case Gpt2Role::Block:
      case Gpt2Role::MoeBlock:
        return block_forward(layer, params, false);
      case Gpt2Role::FinalNorm:
        return final_norm_forward(layer, params);
      case Gpt2Role::Head:
        return head_forward(params);
    }
  }

  void recompute(std::size_t layer, ParamViews params) {
    if (roles[layer] != Gpt2Role::Block && roles[layer] != Gpt2Role::MoeBlock)
      throw std::logic_error("GPT-2: only blocks are checkpointed");
    block_forward(layer, params, true);
  }

  void backward(std::size_t layer, ParamViews params, GradViews grads, float scale) {
    switch (roles[layer]) {
      case Gpt2Role::Embedding:
        return embedding_backward(grads);
      case Gpt2Role::Block:
      case Gpt2Role::MoeBlock:
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

  bool tensor_parallel() const { return dims.tp > 1; }
  static std::span<float> all_of(Buffer& buffer) { return {buffer.data(), buffer.size()}; }
  static std::span<const float> all_of(const Buffer& buffer) {
    return {buffer.data(), buffer.size()};
  }

  // Under SP, this rank's stream rows `part` gathered into the whole micro-batch's (a working
  // buffer: Megatron's global memory buffer); otherwise nothing (the part is the whole).
  Buffer gather_stream(const Buffer& part) {
    if constexpr (Backend::kTensorParallel) {
      if (dims.sp) {
        Buffer whole = working(dims.rows() * dims.channels);
        tp->all_gather(all_of(part), all_of(whole));
        return whole;
      }
    }
    return Buffer{};
  }
  static const float* whole_or(const Buffer& gathered, const Buffer& part) {
    return gathered.size() > 0 ? gathered.data() : part.data();
  }

  // out [stream rows, C] = the TP group's sum of inp [rows, in_width] · weightᵀ, plus the bias once
  // (Megatron's RowParallelLinear: all-reduced in place, or reduce-scattered along the sequence
  // under SP, the bias added after). Without TP one product with its bias.
  void row_parallel(Buffer& out, const Buffer& inp, const float* weight, const float* bias,
                    std::size_t in_width) {
    const std::size_t rows = dims.rows(), C = dims.channels;
    if (!tensor_parallel()) {
      backend.matmul_forward(out.data(), inp.data(), weight, bias, rows, in_width, C);
      return;
    }
    if constexpr (Backend::kTensorParallel) {
      if (dims.sp) {
        Buffer partial = working(rows * C);
        backend.matmul_forward(partial.data(), inp.data(), weight, nullptr, rows, in_width, C);
        tp->reduce_scatter(all_of(partial), all_of(out));
      } else {
        backend.matmul_forward(out.data(), inp.data(), weight, nullptr, rows, in_width, C);
        tp->all_reduce(all_of(out));
      }
      backend.bias_forward(out.data(), bias, dims.stream_rows(), C);
    }
  }

  // Backward of row_parallel given the output gradient of this rank's stream rows (`dout`):
  // adds the weight's gradient and, under TP, the bias's from these rows (whole without SP, this
  // rank's part with it: the SP all-reduce completes it at the step's end); writes dinp.
  void row_parallel_backward(Buffer& dinp, float* dweight, float* dbias, const Buffer& dout,
                             const Buffer& inp, const float* weight, std::size_t in_width) {
    const std::size_t rows = dims.rows(), C = dims.channels;
    const Buffer gathered = gather_stream(dout);  // the output gradient of every row
    backend.matmul_backward(dinp.data(), dweight, tensor_parallel() ? nullptr : dbias,
                            whole_or(gathered, dout), inp.data(), weight, rows, in_width, C);
    if constexpr (Backend::kTensorParallel) {
      if (tensor_parallel()) backend.bias_backward(dbias, dout.data(), dims.stream_rows(), C);
    }
  }

  // The input gradient of a column-parallel region, [rows, C], summed over the TP group
  // (Megatron's f operator in backward): all-reduced in place, or reduce-scattered to this rank's
  // stream rows under SP.
  void reduce_input_grad(Buffer& grad) {
    if constexpr (Backend::kTensorParallel) {
      if (!tensor_parallel()) return;
      if (!dims.sp) {
        tp->all_reduce(all_of(grad));
        return;
      }
      Buffer part = working(dims.stream_rows() * dims.channels);
      tp->reduce_scatter(all_of(grad), all_of(part));
      grad = std::move(part);
    }
  }

  void embedding_forward(ParamViews p) {
    const Gpt2Dims& d = dims;
    if (!tensor_parallel()) {
      outputs[0] = activation(Component::ActivationsStored, d.rows() * d.channels);
      backend.encoder_forward(outputs[0].data(), tokens.data(), p[0].data(), p[1].data(), d.batch,
                              d.seq_len, d.channels, d.vocab);
      return;
    }
    if constexpr (Backend::kTensorParallel) {
      // Megatron's VocabParallelEmbedding: each rank looks up the tokens of its rows (zeros for
      // the others) and the group sums them; the learned positions are added after.
      const std::size_t rows = d.rows(), C = d.channels;
      outputs[0] = activation(Component::ActivationsStored, d.stream_rows() * C);
      Buffer partial = d.sp ? working(rows * C) : Buffer{};
      Buffer& lookup = d.sp ? partial : outputs[0];
      backend.embedding_range_forward(lookup.data(), tokens.data(), rows, p[0].data(),
                                      d.vocab_first, d.shard_vocab, C);
      if (d.sp) {
        tp->reduce_scatter(all_of(partial), all_of(outputs[0]));
      } else {
        tp->all_reduce(all_of(outputs[0]));
      }
      backend.position_forward(outputs[0].data(), p[1].data(), d.first_stream_row(),
                               d.stream_rows(), d.seq_len, C);
    }
  }

  // With checkpointing the intermediates live only during this call (and again in recompute); the
  // block output is the checkpoint the next block starts from. The attention kernel wants q, k and
  // v fused ([rows, 3 x W]); sim's model has three projections, so each is copied into its column
  // block. Under TP a recompute runs the output projection too: its collective is the forward's.
  void block_forward(std::size_t layer, ParamViews p, bool recomputing) {
    const Gpt2Dims& d = dims;
    const std::size_t rows = d.rows(), here = d.stream_rows(), C = d.channels, W = d.width_here(),
                      F = d.ffn_here();
    const float* x = input_of(layer).data();
    Gpt2BlockBuffers<Buffer>& a = blocks[layer];
    const bool checkpointing = options.checkpointing;
    const Component component =
        checkpointing ? Component::ActivationWorking : Component::ActivationsStored;
    const bool moe = roles[layer] == Gpt2Role::MoeBlock;
    a.allocate(
        d, [&](std::size_t count) { return backend.buffer(component, count, held()); },
        [&](std::size_t count) { return backend.buffer(component, count, HeldAs{4}); }, !moe);
    backend.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x,
                              p[kLn1Weight].data(), p[kLn1Bias].data(), here, C);
    {
      const Buffer gathered = gather_stream(a.ln1);
      Buffer projection = working(rows * W);
      for (std::size_t k = 0; k < 3; ++k) {
        backend.matmul_forward(projection.data(), whole_or(gathered, a.ln1),
                               p[kQWeight + 2 * k].data(), p[kQBias + 2 * k].data(), rows, C, W);
        backend.copy_to_fused(a.qkv.data(), projection.data(), k, rows, W);
      }
    }
    {
      Buffer preatt = working(d.scores());
      backend.attention_forward(a.atty.data(), preatt.data(), a.att.data(), a.qkv.data(),
                                kernels::AttentionShape{d.batch, d.seq_len, W, d.heads_here()});
    }
    row_parallel(a.mid, a.atty, p[kOWeight].data(), p[kOBias].data(), W);
    backend.residual_forward(a.mid.data(), a.mid.data(), x, here * C);
    backend.layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(),
                              p[kLn2Weight].data(), p[kLn2Bias].data(), here, C);
    if (moe) {
      if constexpr (kRunsMixtureOfExperts<Backend>) moe_forward(layer, p, recomputing, component);
      return;
    }
    {
      const Buffer gathered = gather_stream(a.ln2);
      backend.matmul_forward(a.fch.data(), whole_or(gathered, a.ln2), p[kFcInWeight].data(),
                             p[kFcInBias].data(), rows, C, F);
    }
    backend.gelu_forward(a.fch_gelu.data(), a.fch.data(), rows * F);
    // Without TP the output (the next block's checkpoint) still exists and is not recomputed.
    if (recomputing && !tensor_parallel()) return;
    Buffer out = recomputing ? working(here * C)
                             : activation(checkpointing ? Component::ActivationCheckpoints
                                                        : Component::ActivationsStored,
                                          here * C);
    row_parallel(out, a.fch_gelu, p[kFcOutWeight].data(), p[kFcOutBias].data(), F);
    backend.residual_forward(out.data(), out.data(), a.mid.data(), here * C);
    if (recomputing) return;
    outputs[layer] = std::move(out);
    if (checkpointing) a.release();
  }

  // A MoE block's MLP (DeepSpeed's MoE: TopKGate, MOELayer's all-to-alls, the experts;
  // exec/model/moe_layer.hpp) on ln_2's output, its output added to the residual. What the layer
  // keeps for backward is charged as the block's other activations are (working under
  // checkpointing: a recompute runs the MoE forward again, all-to-alls included, as DeepSpeed's
  // activation checkpointing does).
  MoeLayerShape moe_shape() const {
    return {.hidden = dims.channels,
            .ffn = dims.expert_ffn,
            .experts = int(dims.experts),
            .top_k = int(dims.top_k),
            .capacity_factor = dims.capacity_factor,
            .min_capacity = dims.min_capacity};
  }
  void moe_forward(std::size_t layer, ParamViews p, bool recomputing, Component component) {
    if (dims.ep > 1 && ep_group == nullptr) {
      throw std::logic_error(std::string(Backend::kModelName) +
                             ": a share of an expert-parallel model runs after "
                             "connect_expert_parallel gave it its EP group");
    }
    const std::size_t rows = dims.rows(), C = dims.channels;
    Gpt2BlockBuffers<Buffer>& a = blocks[layer];
    moes[layer] =
        std::make_unique<ExpertParallelMoe>(moe_shape(), ep_group, *moe_ledger, component, held());
    Buffer y = working(rows * C);
    moes[layer]->forward(all_of(a.ln2), rows, p.subspan(kMoeRouter), all_of(y));
    if (recomputing) return;
    const bool checkpointing = options.checkpointing;
    Buffer out = activation(
        checkpointing ? Component::ActivationCheckpoints : Component::ActivationsStored, rows * C);
    backend.residual_forward(out.data(), y.data(), a.mid.data(), rows * C);
    outputs[layer] = std::move(out);
    if (checkpointing) {
      a.release();
      moes[layer].reset();
    }
  }

  // Backward of moe_forward: d(ln_2 output) from the experts and the router (their gradients
  // added), then ln_2's backward into the residual gradient.
  void moe_backward(std::size_t layer, ParamViews p, GradViews g) {
    const std::size_t rows = dims.rows(), C = dims.channels;
    Gpt2BlockBuffers<Buffer>& a = blocks[layer];
    Buffer dln2 = zeroed_working(rows * C);
    moes[layer]->backward(all_of(dresidual), p.subspan(kMoeRouter), g.subspan(kMoeRouter),
                          all_of(dln2));
    moes[layer].reset();
    backend.layernorm_backward(dresidual.data(), g[kLn2Weight].data(), g[kLn2Bias].data(),
                               dln2.data(), a.mid.data(), p[kLn2Weight].data(), a.ln2_mean.data(),
                               a.ln2_rstd.data(), rows, C);
  }

  void final_norm_forward(std::size_t layer, ParamViews p) {
    const std::size_t here = dims.stream_rows(), C = dims.channels;
    outputs[layer] = activation(Component::ActivationsStored, here * C);
    lnf_mean = fp32(Component::ActivationsStored, here);
    lnf_rstd = fp32(Component::ActivationsStored, here);
    backend.layernorm_forward(outputs[layer].data(), lnf_mean.data(), lnf_rstd.data(),
                              input_of(layer).data(), p[0].data(), p[1].data(), here, C);
  }

  // The LM head multiplies by the token embedding (tied): logits = x · wteᵀ, then the mean
  // cross-entropy of the next tokens. The softmax and the losses are fp32 in any precision; 16-bit
  // logits are first copied to fp32 for them. The per-row losses are averaged in double on the
  // host. Under TP a rank holds its vocabulary rows' logits and the loss is vocab-parallel.
  void head_forward(ParamViews p) {
    const std::size_t rows = dims.rows(), C = dims.channels, V = dims.shard_vocab;
    const std::size_t layer = model.layers.size() - 1;
    logits = activation(Component::ActivationsStored, rows * V);
    probs = fp32(Component::ActivationsStored, rows * V);
    losses = fp32(Component::ActivationsStored, rows);
    {
      const Buffer gathered = gather_stream(input_of(layer));
      backend.matmul_forward(logits.data(), whole_or(gathered, input_of(layer)), p[0].data(),
                             nullptr, rows, C, V);
    }
    Buffer upcast;
    if (sixteen_bit()) {
      upcast = fp32(Component::ActivationWorking, rows * V);
      backend.copy(upcast.data(), logits.data(), rows * V);
    }
    const float* z = sixteen_bit() ? upcast.data() : logits.data();
    if (!tensor_parallel()) {
      backend.crossentropy_softmax_forward(losses.data(), probs.data(), z, targets.data(), rows, V);
    } else {
      if constexpr (Backend::kTensorParallel) vocab_parallel_loss(z);
    }
    const std::vector<float> host = backend.to_host(losses);
    double sum = 0;
    for (std::size_t r = 0; r < rows; ++r) sum += host[r];
    loss = sum / double(rows);
  }

  // Megatron's _VocabParallelCrossEntropy: the rows' maxima, then their target logits and sums of
  // exponentials, each all-reduced over the group in fp32 (one value per token).
  void vocab_parallel_loss(const float* z) {
    const std::size_t rows = dims.rows(), V = dims.shard_vocab;
    Buffer row_max = fp32(Component::ActivationWorking, rows);
    Buffer target_logits = fp32(Component::ActivationWorking, rows);
    Buffer exp_sums = fp32(Component::ActivationWorking, rows);
    backend.crossentropy_shard_max(row_max.data(), z, rows, V, dims.vocab_valid());
    tp->all_reduce_max_fp32(all_of(row_max));
    backend.crossentropy_shard_sums(exp_sums.data(), target_logits.data(), probs.data(), z,
                                    row_max.data(), targets.data(), dims.vocab_first, rows, V,
                                    dims.vocab_valid());
    tp->all_reduce_sum_fp32(all_of(target_logits));
    tp->all_reduce_sum_fp32(all_of(exp_sums));
    backend.crossentropy_shard_finish(losses.data(), probs.data(), exp_sums.data(), row_max.data(),
                                      target_logits.data(), rows, V);
  }

  // Backward: each layer adds its parameter gradients, turns the residual stream's gradient
  // (dresidual) into that of its input, and frees its activations and its input.

  // The loss's gradient enters here, scaled by `scale` (1 / gradient accumulation, times a loss
  // scale).
  void head_backward(std::size_t layer, ParamViews p, GradViews g, float scale) {
    const std::size_t rows = dims.rows(), C = dims.channels, V = dims.shard_vocab;
    Buffer dinput = zeroed_working(rows * C);
    {
      // The loss gradient is fp32 (as the softmax); 16-bit training casts it down for the product.
      Buffer dlogits = fp32(Component::ActivationWorking, rows * V);
      Buffer dlosses = fp32(Component::ActivationWorking, rows);
      backend.fill(dlosses, scale / float(rows));
      if (!tensor_parallel()) {
        backend.crossentropy_softmax_backward(dlogits.data(), dlosses.data(), probs.data(),
                                              targets.data(), rows, V);
      } else {
        if constexpr (Backend::kTensorParallel) {
          backend.crossentropy_shard_backward(dlogits.data(), dlosses.data(), probs.data(),
                                              targets.data(), dims.vocab_first, rows, V);
        }
      }
      Buffer downcast;
      if (sixteen_bit()) {
        downcast = working(rows * V);
        backend.copy(downcast.data(), dlogits.data(), rows * V);
        dlogits.reset();
      }
      const Buffer gathered = gather_stream(input_of(layer));
      backend.matmul_backward(dinput.data(), g[0].data(), nullptr,
                              sixteen_bit() ? downcast.data() : dlogits.data(),
                              whole_or(gathered, input_of(layer)), p[0].data(), rows, C, V);
    }
    for (Buffer* buffer : {&logits, &probs, &losses}) buffer->reset();
    targets.reset();
    reduce_input_grad(dinput);
    dresidual = std::move(dinput);
    input_of(layer).reset();
  }

  void final_norm_backward(std::size_t layer, ParamViews p, GradViews g) {
    const std::size_t here = dims.stream_rows(), C = dims.channels;
    Buffer dinput = zeroed_working(here * C);
    backend.layernorm_backward(dinput.data(), g[0].data(), g[1].data(), dresidual.data(),
                               input_of(layer).data(), p[0].data(), lnf_mean.data(),
                               lnf_rstd.data(), here, C);
    dresidual = std::move(dinput);
    lnf_mean.reset();
    lnf_rstd.reset();
    input_of(layer).reset();
  }

  // out = mid + fc_out(gelu(fc_in(ln_2(mid)))), mid = x + o_proj(attention(qkv(ln_1(x)))): the
  // residual gradient is updated in place, first to d(mid), then to d(x). Under TP each region's
  // input gradient is summed over the group (reduce_input_grad) before its norm's backward.
  void block_backward(std::size_t layer, ParamViews p, GradViews g) {
    const Gpt2Dims& d = dims;
    const std::size_t rows = d.rows(), here = d.stream_rows(), C = d.channels, W = d.width_here(),
                      F = d.ffn_here();
    Gpt2BlockBuffers<Buffer>& a = blocks[layer];
    if (roles[layer] == Gpt2Role::MoeBlock) {
      if constexpr (kRunsMixtureOfExperts<Backend>) moe_backward(layer, p, g);
    } else {
      Buffer dfch = zeroed_working(rows * F);
      row_parallel_backward(dfch, g[kFcOutWeight].data(), g[kFcOutBias].data(), dresidual,
                            a.fch_gelu, p[kFcOutWeight].data(), F);
      backend.gelu_backward_inplace(dfch.data(), a.fch.data(), rows * F);
      Buffer dln2 = zeroed_working(rows * C);
      {
        const Buffer gathered = gather_stream(a.ln2);
        backend.matmul_backward(dln2.data(), g[kFcInWeight].data(), g[kFcInBias].data(),
                                dfch.data(), whole_or(gathered, a.ln2), p[kFcInWeight].data(), rows,
                                C, F);
      }
      dfch.reset();
      reduce_input_grad(dln2);
      backend.layernorm_backward(dresidual.data(), g[kLn2Weight].data(), g[kLn2Bias].data(),
                                 dln2.data(), a.mid.data(), p[kLn2Weight].data(), a.ln2_mean.data(),
                                 a.ln2_rstd.data(), here, C);
    }
    Buffer dqkv = zeroed_working(rows * 3 * W);
    {
      Buffer datty = zeroed_working(rows * W);
      row_parallel_backward(datty, g[kOWeight].data(), g[kOBias].data(), dresidual, a.atty,
                            p[kOWeight].data(), W);
      Buffer dscores = working(d.scores());
      backend.attention_backward(dqkv.data(), dscores.data(), datty.data(), a.qkv.data(),
                                 a.att.data(),
                                 kernels::AttentionShape{d.batch, d.seq_len, W, d.heads_here()});
    }
    Buffer dln1 = zeroed_working(rows * C);
    {
      const Buffer gathered = gather_stream(a.ln1);
      Buffer projection = working(rows * W);
      for (std::size_t k = 0; k < 3; ++k) {
        backend.copy_from_fused(projection.data(), dqkv.data(), k, rows, W);
        backend.matmul_backward(dln1.data(), g[kQWeight + 2 * k].data(), g[kQBias + 2 * k].data(),
                                projection.data(), whole_or(gathered, a.ln1),
                                p[kQWeight + 2 * k].data(), rows, C, W);
      }
    }
    reduce_input_grad(dln1);
    backend.layernorm_backward(dresidual.data(), g[kLn1Weight].data(), g[kLn1Bias].data(),
                               dln1.data(), input_of(layer).data(), p[kLn1Weight].data(),
                               a.ln1_mean.data(), a.ln1_rstd.data(), here, C);
    a.release();
    input_of(layer).reset();
  }

  void embedding_backward(GradViews g) {
    const Gpt2Dims& d = dims;
    if (!tensor_parallel()) {
      backend.encoder_backward(g[0].data(), g[1].data(), dresidual.data(), tokens.data(), d.batch,
                               d.seq_len, d.channels, d.vocab);
    } else {
      if constexpr (Backend::kTensorParallel) {
        // Every row's gradient (gathered under SP): this rank's vocabulary rows and the positions.
        const Buffer gathered = gather_stream(dresidual);
        const float* dout = whole_or(gathered, dresidual);
        backend.embedding_range_backward(g[0].data(), dout, tokens.data(), d.rows(), d.vocab_first,
                                         d.shard_vocab, d.channels);
        backend.position_backward(g[1].data(), dout, 0, d.rows(), d.seq_len, d.channels);
      }
    }
    dresidual.reset();
    tokens.reset();
  }

  // The input of `layer`: the output of the layer before, or for the first layer of a pipeline
  // chunk (other than the model's first) the activation received from the stage before.
  Buffer& input_of(std::size_t layer) {
    return chunk_first[layer] ? chunk_inputs[layer] : outputs[layer - 1];
  }

  // Pipeline parallelism (the engine's Send and Recv ops, exec/engine/pipeline_transfers.hpp).
  std::span<float> receive_input(std::size_t layer) {
    if (!chunk_first[layer])
      throw std::logic_error("GPT-2: a receive into a layer that is not a chunk's first");
    chunk_inputs[layer] = activation(
        options.checkpointing ? Component::ActivationCheckpoints : Component::ActivationsStored,
        dims.stream_rows() * dims.channels);
    return all_of(chunk_inputs[layer]);
  }
  std::span<const float> output(std::size_t layer) const { return all_of(outputs[layer]); }
  void release_output(std::size_t layer) { outputs[layer].reset(); }
  std::span<float> receive_output_grad() {
    dresidual = zeroed_working(dims.stream_rows() * dims.channels);
    return all_of(dresidual);
  }
  std::span<const float> input_grad() const { return all_of(dresidual); }
  void release_input_grad() { dresidual.reset(); }

  // What one micro-batch keeps from its forward to its backward. A pipeline stage runs other
  // micro-batches in between (1F1B): each has its own, swapped in by select_micro_batch.
  struct MicroBatch {
    typename Backend::Tokens tokens, targets;
    std::vector<Buffer> outputs, chunk_inputs;
    std::vector<Gpt2BlockBuffers<Buffer>> blocks;
    Buffer lnf_mean, lnf_rstd, logits, probs, losses;
    double loss = 0;
  };
  void swap_micro_batch(MicroBatch& other) {
    std::swap(tokens, other.tokens);
    std::swap(targets, other.targets);
    std::swap(outputs, other.outputs);
    std::swap(chunk_inputs, other.chunk_inputs);
    std::swap(blocks, other.blocks);
    std::swap(lnf_mean, other.lnf_mean);
    std::swap(lnf_rstd, other.lnf_rstd);
    std::swap(logits, other.logits);
    std::swap(probs, other.probs);
    std::swap(losses, other.losses);
    std::swap(loss, other.loss);
  }
  void select_micro_batch(std::int32_t micro) {
    if (micro == current_micro) return;
    MicroBatch& parked = parked_micro[current_micro];
    swap_micro_batch(parked);
    MicroBatch& next = parked_micro[micro];
    if (next.outputs.empty()) {  // a micro-batch not seen yet: its buffers start empty
      next.outputs.resize(model.layers.size());
      next.chunk_inputs.resize(model.layers.size());
      next.blocks.resize(model.layers.size());
    }
    swap_micro_batch(next);
    parked_micro.erase(micro);
    current_micro = micro;
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
  std::vector<Buffer> chunk_inputs;              // per chunk's first layer: its received input
  std::vector<Gpt2BlockBuffers<Buffer>> blocks;  // per layer (used by blocks only)
  Buffer lnf_mean, lnf_rstd;
  Buffer logits, probs, losses;  // the head's
  Buffer dresidual;              // gradient of the residual stream during backward
  double loss = 0;
  std::vector<bool> chunk_first;  // per layer: the first of a chunk whose input is received
  std::int32_t current_micro = 0;
  std::map<std::int32_t, MicroBatch> parked_micro;  // the other micro-batches in flight
  TensorParallelChannel* tp = nullptr;  // the TP group's collectives (set by the engine under TP)
  MemoryLedger* moe_ledger;             // what the MoE blocks' layers charge their buffers to
  Communicator* ep_group = nullptr;     // the EP group (set by the engine under EP)
  std::vector<std::unique_ptr<ExpertParallelMoe>> moes;  // per MoE block, forward to backward
};

}  // namespace zerolens::exec
