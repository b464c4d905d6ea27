// What a communicator without point to point or an element-wise maximum says when asked for them.
#include "exec/comm/communicator.hpp"

#include <stdexcept>
#include <string>

namespace zerolens::exec {
namespace {

[[noreturn]] void missing(const char* what) {
  throw std::logic_error(std::string("this communicator has no ") + what +
                         " (tensor and pipeline parallelism and ZeRO++ run on MPI's)");
}

}  // namespace

void Communicator::all_reduce_max(std::span<float>) {
  missing("element-wise maximum");
}
void Communicator::all_gather_bytes(std::span<const std::byte>, std::span<std::byte>) {
  missing("byte all-gather");
}
void Communicator::all_to_all_bytes(std::span<const std::byte>, std::span<std::byte>) {
  missing("byte all-to-all");
}
void Communicator::send(std::span<const float>, int, int) {
  missing("send");
}
void Communicator::send(std::span<const std::uint16_t>, int, int) {
  missing("send");
}
void Communicator::recv(std::span<float>, int, int) {
  missing("receive");
}
void Communicator::recv(std::span<std::uint16_t>, int, int) {
  missing("receive");
}

}  // namespace zerolens::exec
