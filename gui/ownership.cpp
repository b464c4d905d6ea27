#include "gui/ownership.hpp"

namespace zerolens::gui {

std::vector<Slice> slices_of(Component component, Bytes bytes, int rank, int dp_size,
                             int max_owners) {
  switch (sharing_of(component)) {
    case Sharing::Partitioned:
      return {{rank, bytes}};
    case Sharing::Unshared:
      return {{kNoOwner, bytes}};
    case Sharing::Replicated:
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
