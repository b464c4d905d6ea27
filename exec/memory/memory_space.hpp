#pragma once
// Where a device's model-state buffers live when the host cannot address them (a GPU's memory).
// The ledger places each device's `NumberBuffer`s in a space (MemoryLedger::place; none, the
// default, is host memory, which is how the CPU backend runs), and `Numbers` does every element
// operation on them through the space, so the engine's code is the same on every backend. Pointers
// into a space are never dereferenced on the host: exec/memory/numbers.cpp copies through the
// space. The host implementations in exec/memory/numbers.cpp define what each operation computes; a
// space must give the same results: bit for bit, except sum_of_squares (its order of summation may
// differ) and the payload bits of a NaN that arithmetic produces.
#include <cstddef>
#include <span>
#include <string>

namespace zerolens::exec {

class Numbers;
class Optimizer;

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;
  virtual std::string name() const = 0;

  // `bytes` zeroed bytes, aligned to at least 256 (nullptr for 0 bytes); throws std::bad_alloc
  // or std::runtime_error naming the failure.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* pointer, std::size_t bytes) noexcept = 0;
  // Complete when they return.
  virtual void copy_to_host(void* host, const void* here, std::size_t bytes) = 0;
  virtual void copy_from_host(void* here, const void* host, std::size_t bytes) = 0;
  virtual void copy_within(void* to, const void* from, std::size_t bytes) = 0;

  // Numbers in this space (every argument; empty ones allowed).
  virtual void convert(Numbers to, Numbers from) = 0;  // same size, any formats
  virtual void add_scaled(Numbers to, Numbers from, float factor) = 0;
  virtual void scale(Numbers values, float factor) = 0;
  virtual void fill_zero(Numbers values) = 0;
  virtual bool has_inf_or_nan(Numbers values) = 0;
  virtual double sum_of_squares(Numbers values) = 0;
  // The optimizer's update of fp32 numbers here (states absent are empty).
  virtual void optimizer_update(const Optimizer& optimizer, Numbers params, Numbers grads,
                                Numbers first, Numbers second) = 0;
};

}  // namespace zerolens::exec
