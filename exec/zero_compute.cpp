// The step loop's dispatch: each op kind to its handler; forward and backward of the model.
#include <stdexcept>
#include <string>

#include "exec/zero_state.hpp"

namespace zerolens::exec {

void ZeroEngine::State::begin_step(std::int64_t step_index) {
  step_index_ = step_index;
  loaded_micro_ = -1;
  loss_sum_ = 0;
  losses_ = 0;
  norm_ = 0;
  overflow_ = false;
  step_scale_ = scaler.scale();
}

// The reduce buffer appears before the op's work and goes after it, in the order of the schedule's
// effects (a backward allocates it before its working set comes and goes).
void ZeroEngine::State::run(const Op& op) {
  follow_reduce_buffer(op, /*allocations=*/true);
  run_op(op);
  follow_reduce_buffer(op, /*allocations=*/false);
}

void ZeroEngine::State::run_op(const Op& op) {
  switch (op.kind) {
    case OpKind::Forward: return forward(op);
    case OpKind::Recompute: return net.recompute(std::size_t(op.layer), layer_params(owner_of(std::size_t(op.layer))).views);
    case OpKind::Backward: return backward(op);
    case OpKind::AllGather:
      if (stage.partitions_parameters() && op.layer >= 0)
        return gather_layer(std::size_t(op.layer));
      if (stage.partitions_parameters()) return gather_persistent();
      return gather_updated_shard(op);
    case OpKind::Release: return release_layer(std::size_t(op.layer));
    case OpKind::ReduceScatter:
    case OpKind::AllReduce: return reduce_bucket(op);
    case OpKind::CopyH2D: return copy_to_device(op);
    case OpKind::CopyD2H: return copy_to_host(op);
    case OpKind::OverflowCheck: return check_overflow();
    case OpKind::GradNorm: return grad_norm();
    case OpKind::NvmeRead: return nvme_read(op);
    case OpKind::NvmeWrite: return nvme_write(op);
    case OpKind::OptimizerStep:
      if (optimizer_device == Device::Nvme) return optimizer_group_step(op.sub_group);
      return optimizer_step();
    case OpKind::LossScaleUpdate: return scaler.update(overflow_);
    default:
      throw std::logic_error(std::string("the CPU executor cannot run a ") + to_string(op.kind) + " op yet");
  }
}

// Global sample ids: micro-step m of rank r takes samples (m x dp + r) x micro_batch onwards, so
// any split of the same global batch over ranks and micro-steps sees the same samples.
void ZeroEngine::State::ensure_batch(std::int32_t micro_step) {
  if (micro_step == loaded_micro_) return;
  const ScheduleContext& c = schedule.context;
  const std::int64_t global_batch = c.micro_batch * c.grad_accumulation * c.dp_size;
  const std::int64_t first = step_index_ * global_batch + (std::int64_t(micro_step) * dp + rank) * c.micro_batch;
  net.load_batch(first, c.micro_batch);
  loaded_micro_ = micro_step;
}

void ZeroEngine::State::forward(const Op& op) {
  ensure_batch(op.micro_step);
  const auto layer = std::size_t(op.layer);
  net.forward(layer, layer_params(owner_of(layer)).views);
  if (layer + 1 == model.layers.size()) {
    loss_sum_ += net.loss();
    ++losses_;
  }
}

// The loss of a step is the mean over its micro-steps, so each micro-step's gradient counts 1/ga;
// fp16 scales it by the loss scale too.
void ZeroEngine::State::backward(const Op& op) {
  const auto layer = std::size_t(op.layer);
  const std::size_t owner = owner_of(layer);
  const LayerParams params = layer_params(owner);
  LayerGrads grads = layer_grads(owner);
  net.backward(layer, params.views, grads.views, float(step_scale_) / float(schedule.context.grad_accumulation));
  grads.commit();
  inject_fault(op);
}

StepReport ZeroEngine::State::finish_step() {
  finish_nvme_io();
  StepReport report;
  const double mean_here = losses_ > 0 ? loss_sum_ / losses_ : 0;
  report.loss = comm.report_sum(mean_here) / dp;
  report.grad_norm = overflow_ ? 0 : norm_;
  report.loss_scale = step_scale_;
  report.skipped = overflow_;
  return report;
}

}  // namespace zerolens::exec
