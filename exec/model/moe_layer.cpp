#include "exec/model/moe_layer.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>

#include "exec/memory/numbers.hpp"
#include "kernels/activation.hpp"
#include "kernels/matmul.hpp"
#include "kernels/precision.hpp"

namespace zerolens::exec {
namespace {

void normal_fill(std::span<float> values, std::mt19937_64& generator) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& value : values) value = normal(generator);
}

// The parameters of local expert `local` within the layer's views.
struct ExpertAt {
  std::size_t at;
  explicit ExpertAt(std::size_t local) : at(1 + 4 * local) {}
  std::size_t fc_in_weight() const { return at; }
  std::size_t fc_in_bias() const { return at + 1; }
  std::size_t fc_out_weight() const { return at + 2; }
  std::size_t fc_out_bias() const { return at + 3; }
};

// Dropless routing packs the routed rows: expert e's kept routes are rows offset[e] ..
// offset[e] + count[e] - 1 of a [top-k x tokens, h] buffer, in slot (token) order.
std::vector<std::size_t> packed_offsets(const kernels::MoeRoutes& routes) {
  std::vector<std::size_t> offset(routes.experts + 1, 0);
  for (std::size_t at = 0; at < routes.expert.size(); ++at) {
    if (routes.slot[at] >= 0) ++offset[std::size_t(routes.expert[at]) + 1];
  }
  for (std::size_t e = 0; e < routes.experts; ++e) offset[e + 1] += offset[e];
  return offset;
}

}  // namespace

void ExpertParallelMoe::initialise_router(std::span<float> router, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  normal_fill(router, generator);
}

void ExpertParallelMoe::initialise_expert(std::span<float> fc_in_weight,
                                          std::span<float> fc_in_bias,
                                          std::span<float> fc_out_weight,
                                          std::span<float> fc_out_bias, std::uint64_t seed,
                                          int global_expert) {
  // A generator of its own per expert, so a value depends on the global expert index only.
  std::mt19937_64 generator(seed + 1 + std::uint64_t(global_expert));
  normal_fill(fc_in_weight, generator);
  normal_fill(fc_out_weight, generator);
  std::fill(fc_in_bias.begin(), fc_in_bias.end(), 0.0f);
  std::fill(fc_out_bias.begin(), fc_out_bias.end(), 0.0f);
}

ExpertParallelMoe::ExpertParallelMoe(const MoeLayerShape& shape, Communicator* ep_group,
                                     MemoryLedger& ledger, Component kept, HeldAs held)
    : shape_(shape), ep_(ep_group), ledger_(&ledger), kept_(kept), held_(held) {
  ep_size_ = ep_ ? ep_->size() : 1;
  if (shape.experts < 1 || shape.experts % ep_size_ != 0)
    throw std::invalid_argument("ExpertParallelMoe: the experts do not split over the EP group");
  local_experts_ = shape.experts / ep_size_;
  first_expert_ = (ep_ ? ep_->rank() : 0) * local_experts_;
  routing_ = MoeRouting{.experts = shape.experts,
                        .local_experts = local_experts_,
                        .top_k = shape.top_k,
                        .expert_parallel = ep_size_,
                        .capacity_factor = shape.capacity_factor,
                        .min_capacity = shape.min_capacity,
                        .hidden = std::int64_t(shape.hidden)};
}

ExpertParallelMoe::Buffer ExpertParallelMoe::buffer(Component component, std::size_t count) const {
  return Buffer(*ledger_, Device::Gpu, component, count, held_);
}

void ExpertParallelMoe::check_params(ParamViews params, std::size_t grads) const {
  const std::size_t h = shape_.hidden, f = shape_.ffn;
  const bool sizes = params.size() == parameter_tensors() &&
                     (grads == 0 || grads == params.size()) &&
                     params[0].size() == std::size_t(shape_.experts) * h;
  bool experts = sizes;
  for (std::size_t le = 0; experts && le < std::size_t(local_experts_); ++le) {
    const ExpertAt e(le);
    experts = params[e.fc_in_weight()].size() == f * h && params[e.fc_in_bias()].size() == f &&
              params[e.fc_out_weight()].size() == h * f && params[e.fc_out_bias()].size() == h;
  }
  if (!experts)
    throw std::invalid_argument("ExpertParallelMoe: the parameters are not the router and " +
                                std::to_string(local_experts_) + " experts' four tensors");
}

void ExpertParallelMoe::exchange(std::span<const float> input, std::span<float> output) {
  if (ep_size_ == 1) {
    std::copy(input.begin(), input.end(), output.begin());
    return;
  }
  if (held_.per_element != sizeof(std::uint16_t)) return ep_->all_to_all(input, output);
  // A 16-bit run's activations cross the wire in 16 bits (DeepSpeed's _AllToAll sends the tensor's
  // own dtype; the plan's bytes are the activation dtype's): rounded to bf16 here, since the fp32
  // kernels know the width, not the format. The wire copies are scratch, as TP's are.
  PlacedBytes sent(*ledger_, Device::Gpu, Component::ActivationWorking,
                   input.size() * sizeof(std::uint16_t), /*scratch=*/true);
  PlacedBytes received(*ledger_, Device::Gpu, Component::ActivationWorking,
                       output.size() * sizeof(std::uint16_t), /*scratch=*/true);
  auto* sent_bits = static_cast<std::uint16_t*>(sent.data());
  auto* received_bits = static_cast<std::uint16_t*>(received.data());
  kernels::cast_fp32_to_bf16(sent_bits, input.data(), input.size());
  ep_->all_to_all_bytes(std::as_bytes(std::span(sent_bits, input.size())),
                        std::as_writable_bytes(std::span(received_bits, output.size())));
  kernels::cast_bf16_to_fp32(output.data(), received_bits, output.size());
}

void ExpertParallelMoe::forward(std::span<const float> x, std::size_t tokens, ParamViews params,
                                std::span<float> y) {
  const std::size_t h = shape_.hidden, E = std::size_t(shape_.experts);
  if (x.size() != tokens * h || y.size() != tokens * h)
    throw std::invalid_argument("ExpertParallelMoe: x or y is not tokens x h");
  check_params(params, 0);
  tokens_ = tokens;
  x_ = x;  // the caller keeps it to the backward (the block's ln_2 output)
  {
    Buffer logits = buffer(Component::ActivationWorking, tokens * E);
    kernels::matmul_forward(logits.data(), x.data(), params[0].data(), nullptr, tokens, h, E);
    // DeepSpeed's capacity with an EP group; dropless without (an expert can take every token).
    capacity_ =
        routing_.exchanges() ? std::size_t(routing_.capacity(std::int64_t(tokens))) : tokens;
    routes_ = kernels::moe_route(logits.data(), tokens, E, std::size_t(shape_.top_k), capacity_);
  }
  if (!routing_.exchanges()) {
    // Dropless (Hugging Face's blocks): each expert computes the rows routed to it, no padding.
    offsets_ = packed_offsets(routes_);
    received_ = buffer(kept_, offsets_.back() * h);
    for (std::size_t at = 0; at < routes_.expert.size(); ++at) {
      if (routes_.slot[at] >= 0)
        std::copy_n(x.data() + at / routes_.top_k * h, h, received_.data() + packed_row(at) * h);
    }
    experts_forward(params);
    std::fill(y.begin(), y.end(), 0.0f);
    for (std::size_t at = 0; at < routes_.expert.size(); ++at) {
      if (routes_.slot[at] < 0) continue;
      const float* row = returned_.data() + packed_row(at) * h;
      float* out = y.data() + at / routes_.top_k * h;
      for (std::size_t c = 0; c < h; ++c) out[c] += routes_.gate[at] * row[c];
    }
    return;
  }
  {
    Buffer dispatched = buffer(Component::ActivationWorking, E * capacity_ * h);
    kernels::moe_dispatch(dispatched.data(), x.data(), routes_, h);
    received_ = buffer(kept_, dispatched.size());
    exchange(dispatched.span(), received_.span());
  }
  experts_forward(params);
  kernels::moe_combine(y.data(), returned_.data(), routes_, h);
}

std::size_t ExpertParallelMoe::packed_row(std::size_t route) const {
  return offsets_[std::size_t(routes_.expert[route])] + std::size_t(routes_.slot[route]);
}

// The rows of local expert `local` in the received buffer: with EP, C rows from each EP rank
// ([ep, local experts, C, h]); dropless, its packed rows.
std::vector<ExpertParallelMoe::Rows> ExpertParallelMoe::rows_of(std::size_t local) const {
  if (!routing_.exchanges()) return {{offsets_[local], offsets_[local + 1] - offsets_[local]}};
  std::vector<Rows> rows;
  const std::size_t L = std::size_t(local_experts_);
  for (std::size_t s = 0; s < std::size_t(ep_size_); ++s)
    rows.push_back({(s * L + local) * capacity_, capacity_});
  return rows;
}

namespace {

// The rows of `parts` (first, count; in rows of width h) copied out of `whole` into one contiguous
// block, and back: an expert's rows from every EP rank, as one matrix-product operand.
template <typename Parts>
std::size_t row_count(const Parts& parts) {
  std::size_t rows = 0;
  for (const auto& part : parts) rows += part.count;
  return rows;
}
template <typename Parts>
void gather_rows(const Parts& parts, const float* whole, float* block, std::size_t h) {
  std::size_t at = 0;
  for (const auto& part : parts) {
    std::copy_n(whole + part.first * h, part.count * h, block + at * h);
    at += part.count;
  }
}
template <typename Parts>
void scatter_rows(const Parts& parts, const float* block, float* whole, std::size_t h) {
  std::size_t at = 0;
  for (const auto& part : parts) {
    std::copy_n(block + at * h, part.count * h, whole + part.first * h);
    at += part.count;
  }
}

}  // namespace

// Each local expert computes its rows (every EP rank's C, or dropless its packed rows), gathered
// into one [rows, h] block: GPT-2's MLP, scattered back; the outputs go back to the tokens' ranks.
void ExpertParallelMoe::experts_forward(ParamViews params) {
  const std::size_t h = shape_.hidden, f = shape_.ffn, total = received_.size() / h;
  hidden_ = buffer(kept_, total * f);
  activated_ = buffer(kept_, total * f);
  Buffer outputs = buffer(Component::ActivationWorking, received_.size());
  std::size_t first = 0;  // the expert's first row in hidden_ and activated_
  for (std::size_t le = 0; le < std::size_t(local_experts_); ++le) {
    const ExpertAt e(le);
    const std::vector<Rows> parts = rows_of(le);
    const std::size_t rows = row_count(parts);
    if (rows == 0) continue;
    Buffer in = buffer(Component::ActivationWorking, rows * h);
    Buffer out = buffer(Component::ActivationWorking, rows * h);
    gather_rows(parts, received_.data(), in.data(), h);
    float* hid = hidden_.data() + first * f;
    float* act = activated_.data() + first * f;
    kernels::matmul_forward(hid, in.data(), params[e.fc_in_weight()].data(),
                            params[e.fc_in_bias()].data(), rows, h, f);
    kernels::gelu_forward(act, hid, rows * f);
    kernels::matmul_forward(out.data(), act, params[e.fc_out_weight()].data(),
                            params[e.fc_out_bias()].data(), rows, f, h);
    scatter_rows(parts, out.data(), outputs.data(), h);
    first += rows;
  }
  returned_ = buffer(kept_, outputs.size());
  exchange(outputs.span(), returned_.span());
}

void ExpertParallelMoe::experts_backward(ParamViews params, GradViews grads,
                                         std::span<const float> doutput, std::span<float> dinput) {
  const std::size_t h = shape_.hidden, f = shape_.ffn;
  std::size_t first = 0;
  for (std::size_t le = 0; le < std::size_t(local_experts_); ++le) {
    const ExpertAt e(le);
    const std::vector<Rows> parts = rows_of(le);
    const std::size_t rows = row_count(parts);
    if (rows == 0) continue;
    Buffer in = buffer(Component::ActivationWorking, rows * h);
    Buffer dout = buffer(Component::ActivationWorking, rows * h);
    Buffer dact = buffer(Component::ActivationWorking, rows * f);
    Buffer din = buffer(Component::ActivationWorking, rows * h);
    gather_rows(parts, received_.data(), in.data(), h);
    gather_rows(parts, doutput.data(), dout.data(), h);
    const float* hid = hidden_.data() + first * f;
    const float* act = activated_.data() + first * f;
    kernels::matmul_backward(dact.data(), grads[e.fc_out_weight()].data(),
                             grads[e.fc_out_bias()].data(), dout.data(), act,
                             params[e.fc_out_weight()].data(), rows, f, h);
    kernels::gelu_backward_inplace(dact.data(), hid, rows * f);
    kernels::matmul_backward(din.data(), grads[e.fc_in_weight()].data(),
                             grads[e.fc_in_bias()].data(), dact.data(), in.data(),
                             params[e.fc_in_weight()].data(), rows, h, f);
    scatter_rows(parts, din.data(), dinput.data(), h);
    first += rows;
  }
}

void ExpertParallelMoe::backward(std::span<const float> dy, ParamViews params, GradViews grads,
                                 std::span<float> dx) {
  const std::size_t h = shape_.hidden, E = std::size_t(shape_.experts), T = tokens_;
  if (dy.size() != T * h || dx.size() != T * h || x_.size() != T * h)
    throw std::invalid_argument(
        "ExpertParallelMoe: backward without its forward, or dy/dx not "
        "tokens x h");
  check_params(params, grads.size());
  const std::size_t size = received_.size();
  Buffer dgate = buffer(Component::ActivationWorking, T * std::size_t(shape_.top_k));
  Buffer ddispatched = buffer(Component::ActivationWorking, size);
  {
    Buffer dreturned = buffer(Component::ActivationWorking, size);
    combine_backward(dy, dreturned.span(), dgate.span());
    // DeepSpeed's combine (_sparse_decode) frees its routed rows once its product's backward ran,
    // before the exchange; Hugging Face's per-expert loop keeps each expert's output until that
    // expert's turn, so dropless they stay through the experts' backward (sim's
    // MoeRouting::token_released_elements).
    if (routing_.exchanges()) returned_.reset();
    // With EP the combine's gradient goes to the experts' ranks, their input gradient comes back.
    Buffer doutput = buffer(Component::ActivationWorking, size);
    exchange(dreturned.span(), doutput.span());
    dreturned.reset();
    Buffer dreceived = buffer(Component::ActivationWorking, size);
    experts_backward(params, grads, doutput.span(), dreceived.span());
    for (Buffer* kept : {&received_, &hidden_, &activated_, &returned_}) kept->reset();
    exchange(dreceived.span(), ddispatched.span());
  }
  if (routing_.exchanges()) {
    kernels::moe_dispatch_backward(dx.data(), ddispatched.data(), routes_, h);
  } else {
    for (std::size_t at = 0; at < routes_.expert.size(); ++at) {
      if (routes_.slot[at] < 0) continue;
      const float* row = ddispatched.data() + packed_row(at) * h;
      float* out = dx.data() + at / routes_.top_k * h;
      for (std::size_t c = 0; c < h; ++c) out[c] += row[c];
    }
  }
  Buffer dlogits = buffer(Component::ActivationWorking, T * E);
  kernels::moe_route_backward(dlogits.data(), dgate.data(), routes_);
  kernels::matmul_backward(dx.data(), grads[0].data(), nullptr, dlogits.data(), x_.data(),
                           params[0].data(), T, h, E);
  x_ = {};
}

// The combine's gradients: each kept route's row gets gate x dy of its token, its gate dy . row.
void ExpertParallelMoe::combine_backward(std::span<const float> dy, std::span<float> dreturned,
                                         std::span<float> dgate) const {
  const std::size_t h = shape_.hidden;
  if (routing_.exchanges()) {
    kernels::moe_combine_backward(dreturned.data(), dgate.data(), dy.data(), returned_.data(),
                                  routes_, h);
    return;
  }
  for (std::size_t at = 0; at < routes_.expert.size(); ++at) {
    if (routes_.slot[at] < 0) continue;
    const std::size_t row = packed_row(at) * h, token = at / routes_.top_k * h;
    double dot = 0;
    for (std::size_t c = 0; c < h; ++c) {
      dreturned[row + c] += routes_.gate[at] * dy[token + c];
      dot += double(dy[token + c]) * double(returned_[row + c]);
    }
    dgate[at] += float(dot);
  }
}

}  // namespace zerolens::exec
