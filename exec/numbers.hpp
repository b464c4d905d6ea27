#pragma once
// Numbers in the training dtype: fp32, or fp16/bf16 stored as uint16 bit patterns (casts in
// kernels/precision.hpp, round to nearest even). `Numbers` views a run of them, `NumberBuffer`
// owns one through the memory ledger, `ScratchFloats` is the CPU backend's fp32 working copy
// (counted apart from the plan's components, see MemoryLedger::allocate_scratch). The collectives
// move the stored bytes: 16-bit buffers cross the wire as 16-bit.
#include <cstdint>
#include <span>
#include <vector>

#include "exec/communicator.hpp"
#include "exec/memory_ledger.hpp"

namespace zerolens::exec {

enum class NumberFormat : std::uint8_t { Fp32, Fp16, Bf16 };
NumberFormat format_of(Precision precision);
std::size_t element_bytes(NumberFormat format);

// A non-owning view (like std::span: copying the view does not copy the numbers).
class Numbers {
 public:
  Numbers() = default;
  explicit Numbers(std::span<float> values) : wide_(values) {}
  Numbers(std::span<std::uint16_t> bits, NumberFormat format) : format_(format), narrow_(bits) {}

  NumberFormat format() const { return format_; }
  std::size_t size() const { return format_ == NumberFormat::Fp32 ? wide_.size() : narrow_.size(); }
  Bytes bytes() const { return Bytes(size() * element_bytes(format_)); }
  std::span<float> wide() const { return wide_; }           // fp32 views only
  std::span<std::uint16_t> narrow() const { return narrow_; }  // 16-bit views only
  Numbers sub(std::size_t first, std::size_t count) const;

  float get(std::size_t i) const;
  void read(std::span<float> out) const;         // widen (exact); out.size() == size()
  void write(std::span<const float> in) const;   // round to the format
  void copy_from(Numbers source) const;          // same size; converts between formats
  void add_scaled(Numbers source, float factor) const;  // this = round(this + factor x source)
  void fill_zero() const;
  bool has_inf_or_nan() const;
  double sum_of_squares() const;

 private:
  NumberFormat format_ = NumberFormat::Fp32;
  std::span<float> wide_;
  std::span<std::uint16_t> narrow_;
};

class NumberBuffer {
 public:
  NumberBuffer() = default;
  NumberBuffer(MemoryLedger& ledger, Device device, Component component, NumberFormat format, std::size_t count);

  NumberFormat format() const { return format_; }
  std::size_t size() const { return format_ == NumberFormat::Fp32 ? wide_.size() : narrow_.size(); }
  Bytes bytes() const { return Bytes(size() * element_bytes(format_)); }
  Numbers view() { return format_ == NumberFormat::Fp32 ? Numbers(wide_.span()) : Numbers(narrow_.span(), format_); }
  Numbers view(std::size_t first, std::size_t count) { return view().sub(first, count); }
  float get(std::size_t i) const;
  void read(std::size_t first, std::span<float> out) const;
  void reset();

 private:
  NumberFormat format_ = NumberFormat::Fp32;
  TrackedBuffer<float> wide_;
  TrackedBuffer<std::uint16_t> narrow_;
};

// fp32 working numbers of the CPU backend (the kernels compute in fp32), accounted as scratch.
class ScratchFloats {
 public:
  ScratchFloats(MemoryLedger& ledger, Device device, std::size_t count);
  ~ScratchFloats() { reset(); }
  ScratchFloats(ScratchFloats&& other) noexcept;
  ScratchFloats& operator=(ScratchFloats&& other) noexcept;
  ScratchFloats(const ScratchFloats&) = delete;
  ScratchFloats& operator=(const ScratchFloats&) = delete;
  std::span<float> span() { return values_; }
  void reset();

 private:
  MemoryLedger* ledger_ = nullptr;
  Device device_ = Device::Gpu;
  std::vector<float> values_;
};

// The collectives on views of either format (both sides of a call share one format).
void all_reduce_sum(Communicator& comm, Numbers buffer);
void reduce_scatter_sum(Communicator& comm, Numbers input, Numbers output);
void reduce_scatter_sum(Communicator& comm, Numbers input, std::span<const int> counts, Numbers output);
void all_gather(Communicator& comm, Numbers input, Numbers output);

}  // namespace zerolens::exec
