#include "gui/palette.hpp"

#include <array>

namespace zerolens::gui {

QColor rank_colour(int column) {
  static const std::array<QRgb, kRankColours> colours = {
      0x4e79a7, 0xf28e2b, 0x59a14f, 0xe15759, 0xb07aa1, 0x76b7b2, 0xedc948, 0x9c755f,
      0xff9da7, 0x2f4b7c, 0xa05195, 0x665191, 0xd45087, 0x003f5c, 0x7a5195, 0x1b9e77};
  return QColor(colours[std::size_t(column) % colours.size()]);
}

QColor other_ranks_colour() {
  return QColor(0xbab0ac);
}

QColor category_colour(Category category) {
  switch (category) {
    case Category::Params:
      return QColor(0x1f77b4);
    case Category::Grads:
      return QColor(0xff7f0e);
    case Category::MasterParams:
      return QColor(0x2ca02c);
    case Category::OptimizerStates:
      return QColor(0x9467bd);
    case Category::Activations:
      return QColor(0xc9b27c);
    case Category::Buffers:
      return QColor(0x8fbcd4);
    case Category::Overhead:
      return QColor(0x9e9e9e);
  }
  return Qt::gray;
}

QColor owned_colour(QColor owner, Category category) {
  switch (category) {
    case Category::Params:
      return owner;
    case Category::Grads:
      return owner.lighter(135);
    case Category::MasterParams:
      return owner.darker(135);
    case Category::OptimizerStates:
      return owner.lighter(165);
    default:
      return owner;
  }
}

QColor op_colour(const std::string& kind) {
  if (kind == "forward") return QColor(0x4e79a7);
  if (kind == "backward") return QColor(0x2f4b7c);
  if (kind == "recompute") return QColor(0x76b7b2);
  if (kind == "all_gather" || kind == "broadcast") return QColor(0xf28e2b);
  if (kind == "reduce_scatter" || kind == "all_reduce" || kind == "all_to_all")
    return QColor(0xe15759);  // gradient reductions (qgZ's all-to-all among them)
  if (kind == "release") return QColor(0xbab0ac);
  if (kind == "copy_h2d" || kind == "copy_d2h") return QColor(0x59a14f);
  if (kind == "nvme_read" || kind == "nvme_write") return QColor(0xb07aa1);
  if (kind == "optimizer_step") return QColor(0xedc948);
  if (kind == "send") return QColor(0x9c755f);
  if (kind == "recv") return QColor(0xd7ccc8);  // a pipeline bubble: waiting for the neighbour
  return QColor(0x9c755f);  // overflow check, grad norm, loss scale
}

QColor tensor_parallel_colour() {
  return QColor(0x17becf);
}

QColor op_colour(const std::string& kind, const std::string& stream) {
  if (stream != "tp") return op_colour(kind);
  if (kind == "all_gather") return tensor_parallel_colour();
  if (kind == "reduce_scatter") return tensor_parallel_colour().darker(140);
  return tensor_parallel_colour().darker(200);  // all-reduce
}

const char* category_label(Category category) {
  switch (category) {
    case Category::Params:
      return "parameters";
    case Category::Grads:
      return "gradients";
    case Category::MasterParams:
      return "fp32 parameters";
    case Category::OptimizerStates:
      return "optimizer states";
    case Category::Activations:
      return "activations";
    case Category::Buffers:
      return "buffers";
    case Category::Overhead:
      return "overhead";
  }
  return "";
}

}  // namespace zerolens::gui
