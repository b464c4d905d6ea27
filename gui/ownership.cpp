#include "gui/ownership.hpp"

namespace zerolens::gui {

Ownership ownership_of(Component component) {
  switch (component) {
    case Component::ParamsPartition:
    case Component::GradsPartition:
    case Component::MasterPartition:
    case Component::OptimizerStatePartition:
    case Component::Fp32GradCast:
      return Ownership::Own;
    case Component::ParamsFull:
    case Component::ParamsPersistent:
    case Component::GradsFull:
    case Component::GatheredParams:
    case Component::UnreducedGrads:
    case Component::ReduceBucket:
      return Ownership::EveryRank;
    default:
      return Ownership::None;
  }
}

std::vector<Slice> slices_of(Component component, Bytes bytes, int rank, int dp_size,
                             int max_owners) {
  switch (ownership_of(component)) {
    case Ownership::Own:
      return {{rank, bytes}};
    case Ownership::None:
      return {{kNoOwner, bytes}};
    case Ownership::EveryRank:
      break;
  }
  const Bytes share = bytes / dp_size;
  if (dp_size > max_owners) return {{rank, share}, {kOtherRanks, bytes - share}};
  std::vector<Slice> slices;
  for (int owner = 0; owner < dp_size; ++owner) {
    slices.push_back({owner, owner + 1 == dp_size ? bytes - share * (dp_size - 1) : share});
  }
  return slices;
}

}  // namespace zerolens::gui
