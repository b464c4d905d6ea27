#include "gui/moments.hpp"

namespace zerolens::gui {

bool is_moment(const Op& op, Moment moment) {
  switch (moment) {
    case Moment::Gather:
      return op.kind == OpKind::AllGather || op.kind == OpKind::Broadcast;
    case Moment::Release:
      return op.kind == OpKind::Release;
    case Moment::Reduce:
      return (op.kind == OpKind::ReduceScatter || op.kind == OpKind::AllReduce) && op.bucket >= 0;
    case Moment::Update:
      return op.kind == OpKind::OptimizerStep;
    case Moment::Peak:
      return false;
  }
  return false;
}

std::int64_t next_moment(const Plan& plan, std::int64_t from, Moment moment) {
  if (moment == Moment::Peak) return plan.device(Device::Gpu).peak_op;
  const auto& ops = plan.schedule.ops;
  const auto count = std::int64_t(ops.size());
  for (std::int64_t k = 1; k <= count; ++k) {
    const std::int64_t i = ((from + k) % count + count) % count;
    if (is_moment(ops[std::size_t(i)], moment)) return i;
  }
  return -1;
}

const char* to_string(Moment moment) {
  switch (moment) {
    case Moment::Gather:
      return "next gather";
    case Moment::Release:
      return "next release";
    case Moment::Reduce:
      return "next gradient reduction";
    case Moment::Update:
      return "next optimizer update";
    case Moment::Peak:
      return "GPU memory peak";
  }
  return "";
}

}  // namespace zerolens::gui
