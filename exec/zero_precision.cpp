// The update in any precision: the fp16 overflow check (and the test hook that forces one), the
// global gradient norm, unscaling and clipping, and the optimizer on the device or on the host.
#include <algorithm>
#include <cmath>
#include <limits>

#include "exec/zero_state.hpp"

namespace zerolens::exec {

// The hook fires once the tensor's gradient is complete on this rank (after the backward of the
// layer owning it), in the first micro-step of the chosen step.
void ZeroEngine::State::inject_fault(const Op& op) {
  for (const GradientFault& fault : options.inject_inf) {
    if (fault.step != step_index_ || fault.rank != rank || op.micro_step != 0) continue;
    if (op.layer != layout.tensor_layer.at(std::size_t(fault.tensor))) continue;
    const float inf = std::numeric_limits<float>::infinity();
    grads_[std::size_t(fault.tensor)].view(std::size_t(fault.element), 1).write(std::span(&inf, 1));
  }
}

// inf or NaN in the gradients this rank owns (stage 0: all of them, identical on every rank).
bool ZeroEngine::State::local_overflow() {
  for (const OwnedSegment& segment : segments_) {
    if (owned_grads(segment).has_inf_or_nan()) return true;
  }
  return false;
}

// The schedule's OverflowCheck (fp16, stages 1-3): a one-byte MAX all-reduce of the local flags.
void ZeroEngine::State::check_overflow() { overflow_ = comm.all_reduce_flag(local_overflow(), OpKind::OverflowCheck); }

// The global norm of the averaged gradients (stages 1-3: partial sums all-reduced), unscaled. A
// skipped step computes none (DeepSpeed returns before it).
void ZeroEngine::State::grad_norm() {
  if (overflow_) return;
  double squares = 0;
  for (const OwnedSegment& segment : segments_) squares += owned_grads(segment).sum_of_squares();
  norm_ = std::sqrt(double(comm.all_reduce_sum_float(float(squares), OpKind::GradNorm))) / step_scale_;
}

// Unscaling and clipping in one factor (DeepSpeed's combined scale). DeepSpeed's ZeRO 1-2 divides
// by the scale already updated for the next step, which on a growth step halves that step's
// gradients; the engine divides by the scale this step's backward used.
float ZeroEngine::State::update_factor() const {
  const double clip = plan.request.config.gradient_clipping;
  const double clipping = clip > 0 && norm_ > clip ? clip / (norm_ + 1e-6) : 1.0;
  return float(clipping / step_scale_);
}

void ZeroEngine::State::optimizer_step() {
  if (!stage.partitions_optimizer_states()) {  // whole gradients, identical on every rank: no
                                               // collective for either check
    if (plan.request.config.precision.precision == Precision::Fp16) overflow_ = local_overflow();
    double squares = 0;
    for (const OwnedSegment& segment : segments_) squares += owned_grads(segment).sum_of_squares();
    norm_ = overflow_ ? 0 : std::sqrt(squares) / step_scale_;
  }
  if (!overflow_) {
    optimizer.begin_step();
    const float factor = update_factor();
    if (optimizer_device == Device::Cpu) {
      host_update(factor);
    } else {
      device_update(factor);
    }
  }
  free_step_gradients();
}

// On the device: fp32 trains its parameters in place; mixed precision casts the owned gradients
// to fp32 (the schedule's Fp32GradCast), updates the master and writes the parameters back.
void ZeroEngine::State::device_update(float factor) {
  NumberBuffer cast;
  if (mixed) cast = {ledger, Device::Gpu, Component::Fp32GradCast, NumberFormat::Fp32, std::size_t(layout.owned)};
  for (const OwnedSegment& segment : segments_) {
    const auto length = std::size_t(segment.length), offset = std::size_t(segment.owned_offset);
    const Numbers grads = owned_grads(segment);
    const Numbers params = mixed ? master_.view(offset, length) : device_params(segment);
    const Numbers fp32_grads = mixed ? cast.view(offset, length) : grads;
    if (mixed) fp32_grads.copy_from(grads);
    if (factor != 1.0f) fp32_grads.scale(factor);
    const auto state = [&](const NumberBuffer& buffer) {
      return buffer.size() == 0 ? Numbers() : buffer.view(offset, length);
    };
    optimizer.update(params, fp32_grads, state(first_state_), state(second_state_));
    if (mixed) device_params(segment).copy_from(params);
  }
}

// On the host (ZeRO-Offload): the fp32 gradient partition is there already; the multi-threaded
// host Adam updates the master (fp32 with parameter offload: the host partition itself). Parameters
// on the host or NVMe are written back now; those on the device wait for the schedule's CopyH2D.
void ZeroEngine::State::host_update(float factor) {
  const OptimizerRange range = optimizer_in_memory();
  update_range(range, factor);
  if (has_master && param_device != Device::Gpu) store_updated_params(range);
}

OptimizerRange ZeroEngine::State::optimizer_in_memory() {
  return {.begin = 0, .master = host_floats(master_), .first_state = host_floats(first_state_),
          .second_state = host_floats(second_state_)};
}

namespace {

// The part of `segment` inside owned elements [begin, end), or an empty segment.
OwnedSegment clip(const OwnedSegment& segment, Elements begin, Elements end) {
  const Elements first = std::max(begin, segment.owned_offset);
  const Elements last = std::min(end, segment.owned_offset + segment.length);
  if (last <= first) return {segment.tensor, segment.begin, 0, first};
  return {segment.tensor, segment.begin + (first - segment.owned_offset), last - first, first};
}

}  // namespace

// The optimizer on the owned elements `range` holds (the whole partition, or one NVMe sub-group),
// with the host gradients unscaled and clipped by `factor` on the way.
void ZeroEngine::State::update_range(const OptimizerRange& range, float factor) {
  const Elements end = range.begin + Elements(range.master.empty() ? layout.owned : Elements(range.master.size()));
  for (const OwnedSegment& whole : segments_) {
    const OwnedSegment segment = clip(whole, range.begin, end);
    if (segment.length == 0) continue;
    const auto length = std::size_t(segment.length);
    const std::span<float> grads = host_grads_.span().subspan(std::size_t(segment.owned_offset), length);
    const auto local = [&](std::span<float> values) {
      return values.empty() ? values : values.subspan(std::size_t(segment.owned_offset - range.begin), length);
    };
    const std::span<float> params = has_master ? local(range.master) : device_params(segment).wide();
    if (factor != 1.0f) {
      for (float& g : grads) g *= factor;
    }
    optimizer.update(params, grads, local(range.first_state), local(range.second_state));
  }
}

// The updated master of `range`, rounded to the training dtype where the parameters live: in
// place on the host (or device, counted by the CopyH2D after), or streamed to NVMe by tensor.
void ZeroEngine::State::store_updated_params(const OptimizerRange& range) {
  const Elements end = range.begin + Elements(range.master.size());
  if (param_store_) {
    for (std::size_t t = 0; t < layout.tensor_partition.size(); ++t) {
      const Elements first = std::max(range.begin, partition_offset_[t]);
      const Elements last = std::min(end, partition_offset_[t] + layout.tensor_partition[t]);
      if (last <= first) continue;
      stream_param_partition(t, first - partition_offset_[t],
                             range.master.subspan(std::size_t(first - range.begin), std::size_t(last - first)));
    }
    return;
  }
  for (const OwnedSegment& whole : segments_) {
    const OwnedSegment segment = clip(whole, range.begin, end);
    if (segment.length == 0) continue;
    device_params(segment).write(
        range.master.subspan(std::size_t(segment.owned_offset - range.begin), std::size_t(segment.length)));
  }
}

}  // namespace zerolens::exec
