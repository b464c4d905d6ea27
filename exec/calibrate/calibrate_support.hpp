#pragma once
// Internals of `zerolens calibrate` shared by its source files.
#include <functional>
#include <memory>
#include <vector>

#include "exec/calibrate/calibrate.hpp"

namespace zerolens::exec {

// Runs `body` `repeats` times with every rank in step (a barrier before each run) and returns
// each run's time on the slowest rank. If `body` throws on any rank, every rank throws (the
// failing rank its own error), so no rank is left waiting in a collective.
// `untimed_setup` (optional) runs on every rank before each timed run, outside the timing.
std::vector<double> timed_runs(Communicator& comm, int repeats, const std::function<void()>& body,
                               const std::function<void()>& untimed_setup = {});

// Runs `action` on every rank; if it throws on any rank, every rank throws.
void on_every_rank(Communicator& comm, const std::function<void()>& action);

// `count` zero floats where the communicator's collectives read and write: host memory for MPI,
// device memory for a GPU communicator (whose spans are device pointers).
using FloatArrayAllocator = std::function<std::shared_ptr<float>(std::size_t count)>;
std::shared_ptr<float> host_float_array(std::size_t count);

// All-reduce, all-gather and reduce-scatter at each message size (none with a single rank).
std::vector<CollectiveRate> measure_collectives(
    Communicator& comm, const std::vector<Bytes>& message_sizes,
    const FloatArrayAllocator& allocate = host_float_array);

// All-reduce and reduce-scatter through the 16-bit (bf16) collectives, on host memory (the CPU
// backend's): MPI reduces them through a user-defined op.
std::vector<CollectiveRate> measure_collectives_16bit(Communicator& comm,
                                                      const std::vector<Bytes>& message_sizes);

}  // namespace zerolens::exec
