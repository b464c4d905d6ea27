#include "exec/engine/optimizer_runner.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace zerolens::exec {

std::span<float> host_floats(const NumberBuffer& buffer) {
  const Numbers view = buffer.view();
  if (!view.on_host())
    throw std::logic_error("the host optimizer's numbers are not in host memory");
  return view.wide();
}

OptimizerRunner::OptimizerRunner(EngineContext& context, GradientReducer& grads,
                                 ParameterStore& params, NvmeSwapper& nvme)
    : ctx_(context),
      grads_(grads),
      params_(params),
      nvme_(nvme),
      optimizer_(context.config().optimizer),
      scaler_(context.config().precision) {}

void OptimizerRunner::allocate_master() {
  if (ctx_.has_master && !nvme_.optimizer_in_files()) {
    master_ = {ctx_.ledger, ctx_.optimizer_device, Component::MasterPartition, NumberFormat::Fp32,
               std::size_t(ctx_.layout.owned)};
  }
}

// On the optimizer's device (NVMe: in files, see NvmeSwapper).
void OptimizerRunner::allocate_states() {
  const std::size_t states =
      ctx_.optimizer_device == Device::Nvme ? 0 : optimizer_.state_per_element();
  const auto state = [&] {
    return NumberBuffer(ctx_.ledger, ctx_.optimizer_device, Component::OptimizerStatePartition,
                        NumberFormat::Fp32, std::size_t(ctx_.layout.owned));
  };
  if (states >= 1) first_state_ = state();
  if (states >= 2) second_state_ = state();
}

void OptimizerRunner::begin_step() {
  norm_ = squares_ = 0;
  overflow_ = overflow_reduced_ = norm_reduced_ = false;
  idle_ = false;
  step_scale_ = scaler_.scale();
}

// inf or NaN in the gradients this rank owns (stage 0: all of them, identical on every rank).
bool OptimizerRunner::local_overflow() {
  for (const OwnedSegment& segment : ctx_.segments) {
    if (grads_.owned_grads(segment).has_inf_or_nan()) return true;
  }
  return false;
}

double OptimizerRunner::local_squares() {
  double squares = 0;
  for (const OwnedSegment& segment : ctx_.segments) {
    if (ctx_.counted_in_norm[std::size_t(segment.tensor)])
      squares += grads_.owned_grads(segment).sum_of_squares();
  }
  return squares;
}

// The group the op reduces over: the data-parallel group, or the TP group and then every
// pipeline stage (DeepSpeed's _model_parallel_all_reduce after the DP one).
static Communicator& group_of(const Op& op, EngineContext& ctx) {
  if (op.group == ProcessGroup::Data) return ctx.comm;
  if (op.group == ProcessGroup::Tensor && ctx.groups->tensor() != nullptr)
    return *ctx.groups->tensor();
  if (op.group == ProcessGroup::Pipeline && op.peer_stage < 0 && ctx.groups->pipeline() != nullptr)
    return *ctx.groups->pipeline();
  throw std::logic_error(std::string("schedule error: a ") + to_string(op.kind) + " over the " +
                         to_string(op.group) + " group");
}

// A one-byte MAX all-reduce of the flags: this rank's own, or the DP group's already.
void OptimizerRunner::check_overflow(const Op& op) {
  const bool flag = overflow_reduced_ ? overflow_ : local_overflow();
  overflow_ = group_of(op, ctx_).all_reduce_flag(flag, OpKind::OverflowCheck);
  overflow_reduced_ = true;
}

// The global norm of the averaged gradients (partial sums all-reduced), unscaled. A skipped step
// computes none (DeepSpeed returns before it). A tensor TP replicates counts once (TP rank 0).
// Expert parallelism: DeepSpeed all-reduces each param group's partial sums over the whole DP group
// (stage_1_and_2.py get_grad_norm_direct: dp_process_group), experts' too, so the Data op's sum of
// this rank's owned squares of both kinds is the global norm's square (every expert counted once:
// the expert-data-parallel groups partition the experts of their expert-parallel rank, and the DP
// group holds every expert-parallel rank). The ExpertData op is _average_expert_grad_norms: the
// value each rank of the group holds, averaged over the group (the same value: 4 bytes, no
// change).
void OptimizerRunner::compute_grad_norm(const Op& op) {
  if (overflow_) return;
  if (op.group == ProcessGroup::ExpertData) return average_expert_norm();
  const double squares = norm_reduced_ ? squares_ : local_squares();
  squares_ = double(group_of(op, ctx_).all_reduce_sum_float(float(squares), OpKind::GradNorm));
  norm_ = std::sqrt(squares_) / step_scale_;
  norm_reduced_ = true;
}

void OptimizerRunner::average_expert_norm() {
  Communicator* experts = ctx_.groups->expert_data();
  if (experts == nullptr || !norm_reduced_) {
    throw std::logic_error(
        "schedule error: the expert norm's average before the data-parallel norm, or without "
        "expert-data-parallel groups");
  }
  squares_ =
      double(experts->all_reduce_sum_float(float(squares_ / experts->size()), OpKind::GradNorm));
  norm_ = std::sqrt(squares_) / step_scale_;
}

// Unscaling and clipping in one factor (DeepSpeed's combined scale). DeepSpeed's ZeRO 1-2 divides
// by the scale already updated for the next step, which on a growth step halves that step's
// gradients; the engine divides by the scale this step's backward used.
float OptimizerRunner::update_factor() const {
  const double clip = ctx_.config().gradient_clipping;
  const double clipping = clip > 0 && norm_ > clip ? clip / (norm_ + 1e-6) : 1.0;
  return float(clipping / step_scale_);
}

void OptimizerRunner::step() {
  // Whole gradients, identical on every DP rank: no DP collective for either check (under TP the
  // schedule's TP ops have reduced both already).
  if (!ctx_.stage.partitions_optimizer_states()) {
    if (ctx_.config().precision.precision == Precision::Fp16 && !overflow_reduced_)
      overflow_ = local_overflow();
    if (!norm_reduced_) norm_ = overflow_ ? 0 : std::sqrt(local_squares()) / step_scale_;
  }
  if (!overflow_) {
    optimizer_.begin_step();
    const float factor = update_factor();
    if (ctx_.optimizer_device == Device::Cpu) {
      host_update(factor);
    } else {
      device_update(factor);
    }
  }
  grads_.free_step_gradients();
}

// The host optimizer on one sub-group as soon as its read is complete; the new parameters go
// where parameters live (on the device they are counted by the schedule's CopyH2D after).
void OptimizerRunner::group_step(std::int32_t group) {
  if (!overflow_) {
    if (group == 0) optimizer_.begin_step();
    nvme_.wait_group(group);
    const OptimizerRange range = nvme_.swapped_group(group);
    update_range(range, update_factor());
    params_.store_updated(range);
  }
  if (nvme_.last_group(group)) grads_.free_step_gradients();
}

// The master rounded to the training dtype, into the parameters. With the optimizer on NVMe each
// sub-group's update wrote its part already (its master is not kept): this op completes the copy
// and counts it. Nothing after a skipped step: nothing changed.
void OptimizerRunner::write_back_params() {
  if (overflow_ || idle_) return;
  if (!ctx_.has_master) {
    throw std::logic_error(
        "schedule error: parameters copied back from a host optimizer without a master");
  }
  params_.write_back(master_.view(), ctx_.optimizer_device == Device::Nvme);
}

// On the device: the owned gradients become one fp32 tensor (the schedule's Fp32GradCast), the
// optimizer updates the master (mixed precision) or the fp32 parameters in place, and mixed
// precision writes the parameters back. Stage 3 converts one sub-group of sub_group_size elements
// at a time, as DeepSpeed does.
void OptimizerRunner::device_update(float factor) {
  const Elements owned = ctx_.layout.owned;
  const Elements group =
      ctx_.stage.partitions_parameters()
          ? std::min(owned, ctx_.layout.sub_group_elements(ctx_.config().zero.sub_group_size))
          : owned;
  for (Elements begin = 0; begin < owned; begin += group) {
    device_update_range(begin, std::min(owned, begin + group), factor);
  }
}

// DeepSpeed's ZeRO optimizer flattens the range's gradient pieces into one new tensor of their
// dtype and casts that to fp32 (`self.flatten(self.averaged_gradients[i]).to(fp32)`,
// stage_1_and_2.py step, stage3.py _prepare_fp32_grad_for_sub_group): the 16-bit flat copy lives
// until the cast is made; fp32 gradients are flattened into the fp32 copy itself. Without ZeRO
// only mixed precision casts; fp32 steps on the gradients where they are.
NumberBuffer OptimizerRunner::fp32_gradients(Elements begin, Elements end) {
  const bool zero = ctx_.stage.partitions_optimizer_states();
  if (!ctx_.mixed && !zero) return {};
  const auto count = std::size_t(end - begin);
  NumberBuffer flat;
  if (zero && ctx_.grad_format != NumberFormat::Fp32) {
    flat = {ctx_.ledger, Device::Gpu, Component::Fp32GradCast, ctx_.grad_format, count};
  }
  NumberBuffer fp32 = {ctx_.ledger, Device::Gpu, Component::Fp32GradCast, NumberFormat::Fp32,
                       count};
  for (const OwnedSegment& whole : ctx_.segments) {
    const OwnedSegment segment = clip(whole, begin, end);
    if (segment.length == 0) continue;
    const std::size_t at = std::size_t(segment.owned_offset - begin),
                      length = std::size_t(segment.length);
    (flat.size() > 0 ? flat : fp32).view(at, length).copy_from(grads_.owned_grads(segment));
  }
  if (flat.size() > 0) fp32.view().copy_from(flat.view());
  return fp32;
}

void OptimizerRunner::device_update_range(Elements begin, Elements end, float factor) {
  const NumberBuffer fp32 = fp32_gradients(begin, end);
  const bool mixed = ctx_.mixed;
  for (const OwnedSegment& whole : ctx_.segments) {
    const OwnedSegment segment = clip(whole, begin, end);
    if (segment.length == 0) continue;
    const auto length = std::size_t(segment.length), offset = std::size_t(segment.owned_offset);
    const Numbers params = mixed ? master_.view(offset, length) : params_.device_params(segment);
    const Numbers grads = fp32.size() > 0 ? fp32.view(offset - std::size_t(begin), length)
                                          : grads_.owned_grads(segment);
    if (factor != 1.0f) grads.scale(factor);
    const auto state = [&](const NumberBuffer& buffer) {
      return buffer.size() == 0 ? Numbers() : buffer.view(offset, length);
    };
    optimizer_.update(params, grads, state(first_state_), state(second_state_));
    if (mixed) params_.device_params(segment).copy_from(params);
  }
}

// The fp32 gradient partition is on the host already; the multi-threaded host Adam updates the
// master (fp32 with parameter offload: the host partition itself). Parameters on the host or NVMe
// are written back now; those on the device wait for the schedule's CopyH2D.
void OptimizerRunner::host_update(float factor) {
  const OptimizerRange range = in_memory();
  update_range(range, factor);
  if (ctx_.has_master && (ctx_.param_device != Device::Gpu || !ctx_.writes_back_params))
    params_.store_updated(range);
}

OptimizerRange OptimizerRunner::in_memory() {
  return {.begin = 0,
          .master = host_floats(master_),
          .first_state = host_floats(first_state_),
          .second_state = host_floats(second_state_)};
}

void OptimizerRunner::update_range(const OptimizerRange& range, float factor) {
  const Elements end =
      range.begin + (range.master.empty() ? ctx_.layout.owned : Elements(range.master.size()));
  const std::span<float> host_grads = grads_.host_partition();
  for (const OwnedSegment& whole : ctx_.segments) {
    const OwnedSegment segment = clip(whole, range.begin, end);
    if (segment.length == 0) continue;
    const auto length = std::size_t(segment.length);
    const std::span<float> grads = host_grads.subspan(std::size_t(segment.owned_offset), length);
    const auto local = [&](std::span<float> values) {
      return values.empty()
                 ? values
                 : values.subspan(std::size_t(segment.owned_offset - range.begin), length);
    };
    const std::span<float> params =
        ctx_.has_master ? local(range.master) : params_.device_params(segment).wide();
    if (factor != 1.0f) {
      for (float& g : grads) g *= factor;
    }
    optimizer_.update(params, grads, local(range.first_state), local(range.second_state));
  }
}

}  // namespace zerolens::exec
