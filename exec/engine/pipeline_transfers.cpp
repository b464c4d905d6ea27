#include "exec/engine/pipeline_transfers.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/precision.hpp"

namespace zerolens::exec {
namespace {

int tag_of(const Op& op) {
  return op.phase == Phase::Forward ? 0 : 1;
}

}  // namespace

PipelineTransfers::PipelineTransfers(EngineContext& context, LayerModel& net)
    : ctx_(context),
      net_(net),
      dtype_(context.config().precision.precision),
      element_(context.config().precision.param_bytes()) {}

const PipelineChunk& PipelineTransfers::chunk(std::int32_t global) const {
  for (const PipelineChunk& c : ctx_.model.pipeline_chunks) {
    if (c.global_index == global) return c;
  }
  throw std::logic_error("schedule error: pipeline chunk " + std::to_string(global) +
                         " is not on this stage");
}

Communicator& PipelineTransfers::group() const {
  if (ctx_.groups->pipeline() == nullptr)
    throw std::logic_error("schedule error: a pipeline transfer without pipeline stages");
  return *ctx_.groups->pipeline();
}

void PipelineTransfers::check_size(const Op& op, std::size_t elements) const {
  if (Bytes(elements) * element_ != op.bytes || op.wire_element_bytes != element_) {
    throw std::logic_error(std::string("schedule error: the pipeline ") + to_string(op.kind) +
                           " carries " + std::to_string(elements) + " elements of " +
                           std::to_string(element_) + " bytes, the schedule's " +
                           std::to_string(op.bytes) + " bytes");
  }
}

// Forward: the output of this chunk's last layer; backward: the gradient of its input. The model
// lets go of either once the copy is made (its consumer is on the other stage).
void PipelineTransfers::send(const Op& op) {
  const PipelineChunk& sender = chunk(op.chunk);
  const bool forward = op.phase == Phase::Forward;
  const std::span<const float> values = forward ? net_.output(sender.end - 1) : net_.input_grad();
  check_size(op, values.size());
  in_flight_.emplace_back(ctx_.ledger, Device::Gpu, Component::ActivationWorking,
                          values.size() * std::size_t(element_), /*scratch=*/true);
  void* copy = in_flight_.back().data();
  if (element_ == 4) {
    std::copy(values.begin(), values.end(), static_cast<float*>(copy));
    group().send(std::span<const float>(static_cast<const float*>(copy), values.size()),
                 op.peer_stage, tag_of(op));
  } else {
    auto* bits = static_cast<std::uint16_t*>(copy);
    if (dtype_ == Precision::Bf16) {
      kernels::cast_fp32_to_bf16(bits, values.data(), values.size());
    } else {
      kernels::cast_fp32_to_fp16(bits, values.data(), values.size());
    }
    group().send(std::span<const std::uint16_t>(bits, values.size()), op.peer_stage, tag_of(op));
  }
  if (forward) {
    net_.release_output(sender.end - 1);
  } else {
    net_.release_input_grad();
  }
}

// Forward: the input of the chunk after the sender's (its first layer); backward: the gradient
// of the output of the chunk before the sender's.
void PipelineTransfers::recv(const Op& op) {
  const bool forward = op.phase == Phase::Forward;
  const std::span<float> values =
      forward ? net_.receive_input(chunk(op.chunk + 1).first) : net_.receive_output_grad();
  check_size(op, values.size());
  if (element_ == 4) {
    group().recv(values, op.peer_stage, tag_of(op));
    return;
  }
  PlacedBytes wire(ctx_.ledger, Device::Gpu, Component::ActivationWorking,
                   values.size() * sizeof(std::uint16_t), /*scratch=*/true);
  const std::span<std::uint16_t> bits(static_cast<std::uint16_t*>(wire.data()), values.size());
  group().recv(bits, op.peer_stage, tag_of(op));
  if (dtype_ == Precision::Bf16) {
    kernels::cast_bf16_to_fp32(values.data(), bits.data(), bits.size());
  } else {
    kernels::cast_fp16_to_fp32(values.data(), bits.data(), bits.size());
  }
}

void PipelineTransfers::finish_step() {
  if (ctx_.groups->pipeline() == nullptr) return;
  group().wait_sends();
  in_flight_.clear();
}

}  // namespace zerolens::exec
