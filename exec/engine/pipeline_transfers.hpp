#pragma once
// The engine's pipeline sends and receives (internal to exec/): the schedule's Send and Recv ops
// between neighbouring stages, over this rank's pipeline group (every stage of its TP and DP
// coordinates, numbered by stage). A forward moves the activation leaving a chunk's last layer to
// the next chunk's stage; a backward moves the gradient of a chunk's input back. The message is
// the schedule's (b x s x h elements, a 1/t of them under SP) in the training dtype; a send runs
// while the stage goes on (its copy is kept until the step's end waits for it), a receive waits.
#include <cstdint>
#include <span>
#include <vector>

#include "exec/engine/context.hpp"
#include "exec/model/layer_model.hpp"

namespace zerolens::exec {

class PipelineTransfers {
 public:
  PipelineTransfers(EngineContext& context, LayerModel& net);

  void send(const Op& op);
  void recv(const Op& op);
  // Waits for every send of the step and frees their copies.
  void finish_step();

 private:
  const PipelineChunk& chunk(std::int32_t global) const;  // this stage's chunk `global`
  Communicator& group() const;
  void check_size(const Op& op, std::size_t elements) const;

  EngineContext& ctx_;
  LayerModel& net_;
  Precision dtype_;
  Bytes element_;
  std::vector<PlacedBytes> in_flight_;  // the sends' copies (scratch)
};

}  // namespace zerolens::exec
