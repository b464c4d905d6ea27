// The names of a ZeRO stage.
#include "sim/config/zero_stage.hpp"

namespace zerolens {

std::string ZeroStage::name() const {
  return partitions_optimizer_states() ? "ZeRO-" + std::to_string(number) : "DP";
}

std::string ZeroStage::description() const {
  return partitions_optimizer_states() ? "ZeRO stage " + std::to_string(number)
                                       : "plain data parallelism (ZeRO stage 0)";
}

}  // namespace zerolens
