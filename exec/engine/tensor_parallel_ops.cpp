#include "exec/engine/tensor_parallel_ops.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/precision.hpp"

namespace zerolens::exec {
namespace {

bool layer_collective(const Op& op, std::int32_t layer) {
  return op.group == ProcessGroup::Tensor && op.layer == layer && is_collective(op.kind);
}

}  // namespace

TensorParallelOps::TensorParallelOps(EngineContext& context)
    : ctx_(context),
      comm_(context.groups->tensor()),
      dtype_(context.config().precision.precision),
      element_(context.config().precision.param_bytes()),
      ran_(context.schedule.ops.size(), false),
      starts_(context.schedule.ops.size(), 0),
      ends_(context.schedule.ops.size(), 0) {}

int TensorParallelOps::rank() const {
  return comm_ ? comm_->rank() : 0;
}
int TensorParallelOps::size() const {
  return comm_ ? comm_->size() : 1;
}

void TensorParallelOps::begin_step(Clock::time_point start) {
  step_start_ = start;
  std::fill(ran_.begin(), ran_.end(), false);
}

void TensorParallelOps::begin_layer(std::size_t index) {
  const auto& ops = ctx_.schedule.ops;
  next_ = end_ = index + 1;
  while (end_ < ops.size() && layer_collective(ops[end_], ops[index].layer)) ++end_;
}

void TensorParallelOps::end_layer() {
  if (next_ != end_) {
    throw std::logic_error("schedule error: the layer ran " + std::to_string(next_) +
                           " of its TP collectives up to op " + std::to_string(end_) +
                           "; the schedule lists more (op " + std::to_string(next_) + ": " +
                           to_string(ctx_.schedule.ops[next_].kind) + ")");
  }
}

std::size_t TensorParallelOps::next(OpKind kind, Bytes bytes, Bytes element, const char* call) {
  if (comm_ == nullptr) throw std::logic_error(std::string(call) + " without a TP group");
  if (next_ >= end_) {
    throw std::logic_error(std::string("schedule error: the layer issues a TP ") + call +
                           " the schedule does not list after its compute op");
  }
  const Op& op = ctx_.schedule.ops[next_];
  if (op.kind != kind || op.bytes != bytes || op.wire_element_bytes != element) {
    throw std::logic_error(std::string("schedule error: the layer issues a TP ") + call + " of " +
                           std::to_string(bytes) + " bytes (" + std::to_string(element) +
                           " per element) where op " + std::to_string(next_) + " is a " +
                           to_string(op.kind) + " of " + std::to_string(op.bytes) + " (" +
                           std::to_string(op.wire_element_bytes) + ")");
  }
  return next_++;
}

void TensorParallelOps::done(std::size_t index, Clock::time_point begin) {
  ran_[index] = true;
  starts_[index] = seconds(begin);
  ends_[index] = seconds(Clock::now());
}

double TensorParallelOps::seconds(Clock::time_point at) const {
  return std::chrono::duration<double>(at - step_start_).count();
}

std::span<std::uint16_t> TensorParallelOps::narrow(std::span<const float> values,
                                                   PlacedBytes& bits) const {
  bits = PlacedBytes(ctx_.ledger, Device::Gpu, Component::ActivationWorking,
                     values.size() * sizeof(std::uint16_t), /*scratch=*/true);
  const std::span<std::uint16_t> narrow(static_cast<std::uint16_t*>(bits.data()), values.size());
  if (dtype_ == Precision::Bf16) {
    kernels::cast_fp32_to_bf16(narrow.data(), values.data(), values.size());
  } else {
    kernels::cast_fp32_to_fp16(narrow.data(), values.data(), values.size());
  }
  return narrow;
}

void TensorParallelOps::widen(std::span<const std::uint16_t> bits, std::span<float> values) const {
  if (dtype_ == Precision::Bf16) {
    kernels::cast_bf16_to_fp32(values.data(), bits.data(), bits.size());
  } else {
    kernels::cast_fp16_to_fp32(values.data(), bits.data(), bits.size());
  }
}

void TensorParallelOps::all_reduce(std::span<float> values) {
  const std::size_t op =
      next(OpKind::AllReduce, Bytes(values.size()) * element_, element_, "all-reduce");
  const auto begin = Clock::now();
  if (element_ == 4) {
    comm_->all_reduce_sum(values);
  } else {
    PlacedBytes bits;
    const auto wire = narrow(values, bits);
    comm_->all_reduce_sum(wire, dtype_);
    widen(wire, values);
  }
  done(op, begin);
}

void TensorParallelOps::all_gather(std::span<const float> block, std::span<float> whole) {
  const std::size_t op =
      next(OpKind::AllGather, Bytes(whole.size()) * element_, element_, "all-gather");
  const auto begin = Clock::now();
  if (element_ == 4) {
    comm_->all_gather(block, whole);
  } else {
    PlacedBytes block_bits, whole_bits(ctx_.ledger, Device::Gpu, Component::ActivationWorking,
                                       whole.size() * sizeof(std::uint16_t), /*scratch=*/true);
    const auto wire = narrow(block, block_bits);
    const std::span<std::uint16_t> gathered(static_cast<std::uint16_t*>(whole_bits.data()),
                                            whole.size());
    comm_->all_gather(wire, gathered);
    widen(gathered, whole);
  }
  done(op, begin);
}

void TensorParallelOps::reduce_scatter(std::span<const float> whole, std::span<float> block) {
  const std::size_t op =
      next(OpKind::ReduceScatter, Bytes(whole.size()) * element_, element_, "reduce-scatter");
  const auto begin = Clock::now();
  if (element_ == 4) {
    comm_->reduce_scatter_sum(whole, block);
  } else {
    PlacedBytes whole_bits, block_bits(ctx_.ledger, Device::Gpu, Component::ActivationWorking,
                                       block.size() * sizeof(std::uint16_t), /*scratch=*/true);
    const auto wire = narrow(whole, whole_bits);
    const std::span<std::uint16_t> part(static_cast<std::uint16_t*>(block_bits.data()),
                                        block.size());
    comm_->reduce_scatter_sum(wire, part, dtype_);
    widen(part, block);
  }
  done(op, begin);
}

void TensorParallelOps::all_reduce_max_fp32(std::span<float> values) {
  const std::size_t op =
      next(OpKind::AllReduce, Bytes(values.size()) * 4, 4, "fp32 all-reduce (max)");
  const auto begin = Clock::now();
  comm_->all_reduce_max(values);
  done(op, begin);
}

void TensorParallelOps::all_reduce_sum_fp32(std::span<float> values) {
  const std::size_t op =
      next(OpKind::AllReduce, Bytes(values.size()) * 4, 4, "fp32 all-reduce (sum)");
  const auto begin = Clock::now();
  comm_->all_reduce_sum(values);
  done(op, begin);
}

}  // namespace zerolens::exec
