#include "exec/model/moe_layer.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>

#include "kernels/activation.hpp"
#include "kernels/matmul.hpp"

namespace zerolens::exec {
namespace {

// GPT-2's initialisation, N(0, 0.02), drawn from a generator of its own per tensor group so a
// value depends on the global expert index only, not on which rank holds it.
void initialise(std::span<float> values, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& value : values) value = normal(generator);
}

}  // namespace

ExpertParallelMoe::ExpertParallelMoe(const MoeLayerShape& shape, Communicator* ep_group,
                                     std::uint64_t seed)
    : shape_(shape), ep_(ep_group) {
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
  router_.resize(std::size_t(shape.experts) * shape.hidden);
  router_grad_.assign(router_.size(), 0.0f);
  initialise(router_, seed);
  for (int local = 0; local < local_experts_; ++local) {
    experts_.emplace_back(expert_size());
    expert_grads_.emplace_back(expert_size(), 0.0f);
    initialise(experts_.back(), seed + 1 + std::uint64_t(first_expert_ + local));
    // Zero biases, as GPT-2 starts.
    const std::size_t f = shape.ffn, h = shape.hidden;
    std::fill(experts_.back().begin() + std::ptrdiff_t(f * h),
              experts_.back().begin() + std::ptrdiff_t(f * h + f), 0.0f);
    std::fill(experts_.back().end() - std::ptrdiff_t(h), experts_.back().end(), 0.0f);
  }
}

void ExpertParallelMoe::exchange(std::span<const float> input, std::span<float> output) {
  if (ep_size_ == 1) {
    std::copy(input.begin(), input.end(), output.begin());
    return;
  }
  ep_->all_to_all(input, output);
}

std::vector<float> ExpertParallelMoe::forward(std::span<const float> x, std::size_t tokens) {
  const std::size_t h = shape_.hidden, E = std::size_t(shape_.experts);
  if (x.size() != tokens * h) throw std::invalid_argument("ExpertParallelMoe: x is not tokens x h");
  tokens_ = tokens;
  x_.assign(x.begin(), x.end());
  std::vector<float> logits(tokens * E);
  kernels::matmul_forward(logits.data(), x.data(), router_.data(), nullptr, tokens, h, E);
  // DeepSpeed's capacity with an EP group; dropless without (an expert can take every token).
  capacity_ = routing_.exchanges() ? std::size_t(routing_.capacity(std::int64_t(tokens))) : tokens;
  routes_ = kernels::moe_route(logits.data(), tokens, E, std::size_t(shape_.top_k), capacity_);
  std::vector<float> dispatched(E * capacity_ * h);
  kernels::moe_dispatch(dispatched.data(), x.data(), routes_, h);
  received_.assign(dispatched.size(), 0.0f);
  exchange(dispatched, received_);
  experts_forward();
  std::vector<float> y(tokens * h);
  kernels::moe_combine(y.data(), returned_.data(), routes_, h);
  return y;
}

// Each local expert computes the rows every EP rank sent it: [ep, local, C, h] rows gathered per
// expert into [ep x C, h], GPT-2's MLP, scattered back; the outputs go back to the tokens' ranks.
void ExpertParallelMoe::experts_forward() {
  const std::size_t h = shape_.hidden, f = shape_.ffn, C = capacity_;
  const std::size_t L = std::size_t(local_experts_), ep = std::size_t(ep_size_), rows = ep * C;
  hidden_.assign(L * rows * f, 0.0f);
  activated_.assign(L * rows * f, 0.0f);
  std::vector<float> outputs(received_.size()), in(rows * h), out(rows * h);
  for (std::size_t le = 0; le < L; ++le) {
    const float* w = experts_[le].data();
    for (std::size_t s = 0; s < ep; ++s)
      std::copy_n(received_.data() + ((s * L + le) * C) * h, C * h, in.data() + s * C * h);
    float* hid = hidden_.data() + le * rows * f;
    float* act = activated_.data() + le * rows * f;
    kernels::matmul_forward(hid, in.data(), w, w + f * h, rows, h, f);
    kernels::gelu_forward(act, hid, rows * f);
    kernels::matmul_forward(out.data(), act, w + f * h + f, w + 2 * f * h + f, rows, f, h);
    for (std::size_t s = 0; s < ep; ++s)
      std::copy_n(out.data() + s * C * h, C * h, outputs.data() + ((s * L + le) * C) * h);
  }
  returned_.assign(outputs.size(), 0.0f);
  exchange(outputs, returned_);
}

void ExpertParallelMoe::experts_backward(std::span<const float> doutput, std::span<float> dinput) {
  const std::size_t h = shape_.hidden, f = shape_.ffn, C = capacity_;
  const std::size_t L = std::size_t(local_experts_), ep = std::size_t(ep_size_), rows = ep * C;
  std::vector<float> in(rows * h), dout(rows * h), dact(rows * f), din(rows * h);
  for (std::size_t le = 0; le < L; ++le) {
    const float* w = experts_[le].data();
    float* g = expert_grads_[le].data();
    for (std::size_t s = 0; s < ep; ++s) {
      const std::size_t at = ((s * L + le) * C) * h;
      std::copy_n(received_.data() + at, C * h, in.data() + s * C * h);
      std::copy_n(doutput.data() + at, C * h, dout.data() + s * C * h);
    }
    const float* hid = hidden_.data() + le * rows * f;
    const float* act = activated_.data() + le * rows * f;
    std::fill(dact.begin(), dact.end(), 0.0f);
    kernels::matmul_backward(dact.data(), g + f * h + f, g + 2 * f * h + f, dout.data(), act,
                             w + f * h + f, rows, f, h);
    kernels::gelu_backward_inplace(dact.data(), hid, rows * f);
    std::fill(din.begin(), din.end(), 0.0f);
    kernels::matmul_backward(din.data(), g, g + f * h, dact.data(), in.data(), w, rows, h, f);
    for (std::size_t s = 0; s < ep; ++s)
      std::copy_n(din.data() + s * C * h, C * h, dinput.data() + ((s * L + le) * C) * h);
  }
}

std::vector<float> ExpertParallelMoe::backward(std::span<const float> dy) {
  const std::size_t h = shape_.hidden, E = std::size_t(shape_.experts), T = tokens_;
  const std::size_t buffer = E * capacity_ * h;
  std::vector<float> dreturned(buffer, 0.0f), dgate(T * std::size_t(shape_.top_k), 0.0f);
  kernels::moe_combine_backward(dreturned.data(), dgate.data(), dy.data(), returned_.data(),
                                routes_, h);
  // The combine's gradient goes to the experts' ranks, their input gradient comes back.
  std::vector<float> doutput(buffer), dreceived(buffer, 0.0f), ddispatched(buffer);
  exchange(dreturned, doutput);
  experts_backward(doutput, dreceived);
  exchange(dreceived, ddispatched);
  std::vector<float> dx(T * h, 0.0f), dlogits(T * E, 0.0f);
  kernels::moe_dispatch_backward(dx.data(), ddispatched.data(), routes_, h);
  kernels::moe_route_backward(dlogits.data(), dgate.data(), routes_);
  kernels::matmul_backward(dx.data(), router_grad_.data(), nullptr, dlogits.data(), x_.data(),
                           router_.data(), T, h, E);
  return dx;
}

}  // namespace zerolens::exec
