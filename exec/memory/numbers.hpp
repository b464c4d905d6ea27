#pragma once
// Numbers in the training dtype: fp32, or fp16/bf16 stored as uint16 bit patterns (casts in
// kernels/precision.hpp, round to nearest even). `Numbers` views a run of them, `NumberBuffer`
// owns one through the memory ledger, `ScratchFloats` is the fp32 copy of one layer the model
// computes on (counted apart from the plan's components, see MemoryLedger::allocate_scratch). The
// collectives move the stored bytes: 16-bit buffers cross the wire as 16-bit.
//
// Numbers live in host memory or in the memory space the ledger places their device in
// (exec/memory/memory_space.hpp): every operation below works on either, and between spaces (a copy
// from a device buffer to a host one is a device-to-host copy). wide()/narrow() hand out the raw
// pointers, which only host code may dereference when on_host().
#include <cstdint>
#include <span>
#include <vector>

#include "exec/comm/communicator.hpp"
#include "exec/memory/memory_ledger.hpp"
#include "exec/memory/memory_space.hpp"

namespace zerolens::exec {

enum class NumberFormat : std::uint8_t { Fp32, Fp16, Bf16 };
NumberFormat format_of(Precision precision);
std::size_t element_bytes(NumberFormat format);

// A non-owning view (like std::span: copying the view does not copy the numbers).
class Numbers {
 public:
  Numbers() = default;
  explicit Numbers(std::span<float> values, MemorySpace* space = nullptr)
      : space_(space), wide_(values) {}
  Numbers(std::span<std::uint16_t> bits, NumberFormat format, MemorySpace* space = nullptr)
      : format_(format), space_(space), narrow_(bits) {}

  NumberFormat format() const { return format_; }
  MemorySpace* space() const { return space_; }  // nullptr: host memory
  bool on_host() const { return space_ == nullptr; }
  std::size_t size() const { return format_ == NumberFormat::Fp32 ? wide_.size() : narrow_.size(); }
  Bytes bytes() const { return Bytes(size() * element_bytes(format_)); }
  std::span<float> wide() const { return wide_; }              // fp32 views only
  std::span<std::uint16_t> narrow() const { return narrow_; }  // 16-bit views only
  Numbers sub(std::size_t first, std::size_t count) const;

  float get(std::size_t i) const;
  void read(std::span<float> out) const;                // widen (exact); out.size() == size()
  void write(std::span<const float> in) const;          // round to the format
  void copy_from(Numbers source) const;                 // same size; converts between formats
  void add_scaled(Numbers source, float factor) const;  // this = round(this + factor x source)
  void scale(float factor) const;                       // this = round(factor x this)
  void fill_zero() const;
  bool has_inf_or_nan() const;
  double sum_of_squares() const;

 private:
  NumberFormat format_ = NumberFormat::Fp32;
  MemorySpace* space_ = nullptr;
  std::span<float> wide_;
  std::span<std::uint16_t> narrow_;
};

// Memory of one device charged to a ledger for its whole life, in the space the ledger places
// that device in (zeroed). Move-only. `scratch` charges it as scratch instead of under `component`.
class PlacedBytes {
 public:
  PlacedBytes() = default;
  PlacedBytes(MemoryLedger& ledger, Device device, Component component, std::size_t bytes,
              bool scratch = false);
  ~PlacedBytes() { reset(); }
  PlacedBytes(PlacedBytes&& other) noexcept { swap(other); }
  PlacedBytes& operator=(PlacedBytes&& other) noexcept;
  PlacedBytes(const PlacedBytes&) = delete;
  PlacedBytes& operator=(const PlacedBytes&) = delete;
  void* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  MemorySpace* space() const { return space_; }
  void reset();

 private:
  void swap(PlacedBytes& other) noexcept;
  MemoryLedger* ledger_ = nullptr;
  Device device_ = Device::Gpu;
  Component component_ = Component::ParamsFull;
  MemorySpace* space_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool scratch_ = false;
};

class NumberBuffer {
 public:
  NumberBuffer() = default;
  NumberBuffer(MemoryLedger& ledger, Device device, Component component, NumberFormat format,
               std::size_t count);

  NumberFormat format() const { return format_; }
  std::size_t size() const { return count_; }
  Bytes bytes() const { return Bytes(size() * element_bytes(format_)); }
  Numbers view() const;
  Numbers view(std::size_t first, std::size_t count) const { return view().sub(first, count); }
  float get(std::size_t i) const { return view().get(i); }
  void read(std::size_t first, std::span<float> out) const { view(first, out.size()).read(out); }
  void reset();

 private:
  NumberFormat format_ = NumberFormat::Fp32;
  std::size_t count_ = 0;
  PlacedBytes memory_;
};

// fp32 working numbers the model computes on (a 16-bit layer's parameters and gradients widened),
// accounted as scratch, in the device's memory space.
class ScratchFloats {
 public:
  ScratchFloats(MemoryLedger& ledger, Device device, std::size_t count)
      : memory_(ledger, device, Component::ActivationWorking, count * sizeof(float),
                /*scratch=*/true) {}
  std::span<float> span() const {
    return {static_cast<float*>(memory_.data()), memory_.size() / sizeof(float)};
  }
  Numbers view() const { return Numbers(span(), memory_.space()); }
  void reset() { memory_.reset(); }

 private:
  PlacedBytes memory_;
};

// The collectives on views of either format (both sides of a call share one format).
void all_reduce_sum(Communicator& comm, Numbers buffer);
void reduce_scatter_sum(Communicator& comm, Numbers input, Numbers output);
void reduce_scatter_sum(Communicator& comm, Numbers input, std::span<const int> counts,
                        Numbers output);
void all_gather(Communicator& comm, Numbers input, Numbers output);

}  // namespace zerolens::exec
