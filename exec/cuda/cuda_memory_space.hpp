#pragma once
// The memory space of one CUDA device (exec/memory/memory_space.hpp): model-state buffers in its
// global memory, the element operations as kernels/cuda's kernels. Every call selects the device
// first and has completed when it returns (the engine is sequential). Work goes on the legacy
// default stream, which the device communicators' blocking streams wait for. Plain C++: g++ code
// includes it.
#include <cstddef>
#include <initializer_list>
#include <string>

#include "exec/memory/memory_space.hpp"
#include "exec/memory/numbers.hpp"

namespace zerolens::exec {

class CudaMemorySpace final : public MemorySpace {
 public:
  // No CUDA call until the first allocation or operation on non-empty numbers.
  explicit CudaMemorySpace(int device) : device_(device) {}
  ~CudaMemorySpace() override;
  CudaMemorySpace(const CudaMemorySpace&) = delete;
  CudaMemorySpace& operator=(const CudaMemorySpace&) = delete;

  int device() const { return device_; }
  std::string name() const override;  // "cuda:<device>"

  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer, std::size_t bytes) noexcept override;
  void copy_to_host(void* host, const void* here, std::size_t bytes) override;
  void copy_from_host(void* here, const void* host, std::size_t bytes) override;
  void copy_within(void* to, const void* from, std::size_t bytes) override;

  void convert(Numbers to, Numbers from) override;
  void add_scaled(Numbers to, Numbers from, float factor) override;
  void scale(Numbers values, float factor) override;
  void fill_zero(Numbers values) override;
  bool has_inf_or_nan(Numbers values) override;
  double sum_of_squares(Numbers values) override;
  void optimizer_update(const Optimizer& optimizer, Numbers params, Numbers grads, Numbers first,
                        Numbers second) override;

 private:
  // Checks that the non-empty `numbers` are here and selects the device; false when the first is
  // empty (nothing to do, no CUDA call).
  bool begin(const char* operation, std::initializer_list<Numbers> numbers) const;
  void synchronize(const char* operation) const;
  struct Scratch;      // the reductions' results, in device memory
  Scratch* scratch();  // allocated on the first reduction

  int device_;
  Scratch* scratch_ = nullptr;
};

}  // namespace zerolens::exec
