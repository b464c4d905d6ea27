#include "exec/memory/numbers.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/precision.hpp"

namespace zerolens::exec {
namespace {

// Element-wise work on 16-bit numbers goes through fp32 in chunks of this many elements.
constexpr std::size_t kChunk = 1024;

void widen_into(NumberFormat format, const std::uint16_t* in, float* out, std::size_t count) {
  if (format == NumberFormat::Fp16) {
    kernels::cast_fp16_to_fp32(out, in, count);
  } else {
    kernels::cast_bf16_to_fp32(out, in, count);
  }
}

void narrow_into(NumberFormat format, const float* in, std::uint16_t* out, std::size_t count) {
  if (format == NumberFormat::Fp16) {
    kernels::cast_fp32_to_fp16(out, in, count);
  } else {
    kernels::cast_fp32_to_bf16(out, in, count);
  }
}

void require_same_size(std::size_t a, std::size_t b, const char* what) {
  if (a != b) throw std::invalid_argument(std::string(what) + ": sizes differ");
}

Precision wire_format(NumberFormat format) {
  return format == NumberFormat::Fp16 ? Precision::Fp16 : Precision::Bf16;
}

void require_same_format(Numbers a, Numbers b, const char* what) {
  if (a.format() != b.format()) throw std::invalid_argument(std::string(what) + ": formats differ");
}

}  // namespace

NumberFormat format_of(Precision precision) {
  switch (precision) {
    case Precision::Fp32:
      return NumberFormat::Fp32;
    case Precision::Fp16:
      return NumberFormat::Fp16;
    case Precision::Bf16:
      return NumberFormat::Bf16;
  }
  return NumberFormat::Fp32;
}

std::size_t element_bytes(NumberFormat format) {
  return format == NumberFormat::Fp32 ? 4 : 2;
}

Numbers Numbers::sub(std::size_t first, std::size_t count) const {
  if (format_ == NumberFormat::Fp32) return Numbers(wide_.subspan(first, count), space_);
  return {narrow_.subspan(first, count), format_, space_};
}

float Numbers::get(std::size_t i) const {
  if (!on_host()) {
    float value = 0;
    sub(i, 1).read(std::span(&value, 1));
    return value;
  }
  switch (format_) {  // one number: not through the (multi-threaded) bulk casts
    case NumberFormat::Fp32: return wide_[i];
    case NumberFormat::Fp16: return kernels::fp16_to_fp32(narrow_[i]);
    case NumberFormat::Bf16: return kernels::bf16_to_fp32(narrow_[i]);
  }
  return 0;
}

void Numbers::read(std::span<float> out) const {
  require_same_size(out.size(), size(), "Numbers::read");
  if (format_ == NumberFormat::Fp32) {
    if (on_host()) {
      std::copy(wide_.begin(), wide_.end(), out.begin());
    } else {
      space_->copy_to_host(out.data(), wide_.data(), out.size_bytes());
    }
    return;
  }
  std::vector<std::uint16_t> bits(on_host() ? 0 : size());
  if (!on_host())
    space_->copy_to_host(bits.data(), narrow_.data(), bits.size() * sizeof(std::uint16_t));
  widen_into(format_, on_host() ? narrow_.data() : bits.data(), out.data(), out.size());
}

void Numbers::write(std::span<const float> in) const {
  require_same_size(in.size(), size(), "Numbers::write");
  if (format_ == NumberFormat::Fp32) {
    if (on_host()) {
      std::copy(in.begin(), in.end(), wide_.begin());
    } else {
      space_->copy_from_host(wide_.data(), in.data(), in.size_bytes());
    }
    return;
  }
  if (on_host()) return narrow_into(format_, in.data(), narrow_.data(), in.size());
  std::vector<std::uint16_t> bits(size());
  narrow_into(format_, in.data(), bits.data(), in.size());
  space_->copy_from_host(narrow_.data(), bits.data(), bits.size() * sizeof(std::uint16_t));
}

namespace {

const void* address(Numbers numbers) {
  return numbers.format() == NumberFormat::Fp32 ? static_cast<const void*>(numbers.wide().data())
                                                : static_cast<const void*>(numbers.narrow().data());
}

void* writable_address(Numbers numbers) {
  return const_cast<void*>(address(numbers));
}

// Same format, different places: a plain copy of the bytes (through the host between two spaces).
void copy_bytes(Numbers to, Numbers from) {
  const auto bytes = std::size_t(to.bytes());
  if (bytes == 0) return;
  if (to.on_host() && from.on_host()) {
    std::memmove(writable_address(to), address(from), bytes);
    return;
  }
  if (to.on_host()) return from.space()->copy_to_host(writable_address(to), address(from), bytes);
  if (from.on_host()) return to.space()->copy_from_host(writable_address(to), address(from), bytes);
  std::vector<std::byte> host(bytes);
  from.space()->copy_to_host(host.data(), address(from), bytes);
  to.space()->copy_from_host(writable_address(to), host.data(), bytes);
}

}  // namespace

void Numbers::copy_from(Numbers source) const {
  require_same_size(source.size(), size(), "Numbers::copy_from");
  if (!on_host() && source.space() == space_) return space_->convert(*this, source);
  if (!on_host() || !source.on_host()) {
    if (source.format() == format_) return copy_bytes(*this, source);
    std::vector<float> values(size());  // between places and formats: widened on the host
    source.read(values);
    return write(values);
  }
  if (source.format() == format_) {
    if (format_ == NumberFormat::Fp32) {
      std::copy(source.wide_.begin(), source.wide_.end(), wide_.begin());
    } else {
      std::copy(source.narrow_.begin(), source.narrow_.end(), narrow_.begin());
    }
    return;
  }
  std::array<float, kChunk> values;
  for (std::size_t first = 0; first < size(); first += kChunk) {
    const std::size_t count = std::min(kChunk, size() - first);
    const std::span<float> chunk(values.data(), count);
    source.sub(first, count).read(chunk);
    sub(first, count).write(chunk);
  }
}

void Numbers::add_scaled(Numbers source, float factor) const {
  require_same_size(source.size(), size(), "Numbers::add_scaled");
  if (!on_host() && source.space() == space_) return space_->add_scaled(*this, source, factor);
  if (!on_host() || !source.on_host()) {  // between places: on host copies, written back
    std::vector<float> mine(size()), theirs(size());
    read(mine);
    source.read(theirs);
    Numbers(std::span(mine)).add_scaled(Numbers(std::span(theirs)), factor);
    return write(mine);
  }
  std::array<float, kChunk> mine, theirs;
  for (std::size_t first = 0; first < size(); first += kChunk) {
    const std::size_t count = std::min(kChunk, size() - first);
    const Numbers target = sub(first, count);
    target.read({mine.data(), count});
    source.sub(first, count).read({theirs.data(), count});
    for (std::size_t i = 0; i < count; ++i) mine[i] += factor * theirs[i];
    target.write({mine.data(), count});
  }
}

void Numbers::scale(float factor) const {
  if (!on_host()) return space_->scale(*this, factor);
  std::array<float, kChunk> values;
  for (std::size_t first = 0; first < size(); first += kChunk) {
    const std::size_t count = std::min(kChunk, size() - first);
    const Numbers target = sub(first, count);
    target.read({values.data(), count});
    for (std::size_t i = 0; i < count; ++i) values[i] *= factor;
    target.write({values.data(), count});
  }
}

void Numbers::fill_zero() const {
  if (!on_host()) return space_->fill_zero(*this);
  std::fill(wide_.begin(), wide_.end(), 0.0f);
  std::fill(narrow_.begin(), narrow_.end(), std::uint16_t(0));  // +0 in fp16 and bf16
}

bool Numbers::has_inf_or_nan() const {
  if (!on_host()) return space_->has_inf_or_nan(*this);
  if (format_ == NumberFormat::Fp32) return kernels::has_inf_or_nan(wide_.data(), wide_.size());
  // All exponent bits set: fp16 0x7c00, bf16 0x7f80.
  const std::uint16_t exponent = format_ == NumberFormat::Fp16 ? 0x7c00 : 0x7f80;
  return std::any_of(narrow_.begin(), narrow_.end(),
                     [&](std::uint16_t bits) { return (bits & exponent) == exponent; });
}

double Numbers::sum_of_squares() const {
  if (!on_host()) return space_->sum_of_squares(*this);
  double sum = 0;  // in element order (chunks only batch the widening)
  std::array<float, kChunk> values;
  for (std::size_t first = 0; first < size(); first += kChunk) {
    const std::size_t count = std::min(kChunk, size() - first);
    sub(first, count).read({values.data(), count});
    for (std::size_t i = 0; i < count; ++i) sum += double(values[i]) * double(values[i]);
  }
  return sum;
}

PlacedBytes::PlacedBytes(MemoryLedger& ledger, Device device, Component component,
                         std::size_t bytes, bool scratch)
    : device_(device),
      component_(component),
      space_(ledger.space(device)),
      bytes_(bytes),
      scratch_(scratch) {
  if (space_) {
    data_ = space_->allocate(bytes);
  } else if (bytes > 0) {
    constexpr std::size_t alignment = 64;  // aligned_alloc needs a size that is a multiple of it
    data_ = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, bytes);
  }
  ledger_ = &ledger;  // charged once the memory is there, so a failed allocation leaves no charge
  if (scratch_) {
    ledger_->allocate_scratch(device_, Bytes(bytes_));
  } else {
    ledger_->allocate(device_, component_, Bytes(bytes_));
  }
}

PlacedBytes& PlacedBytes::operator=(PlacedBytes&& other) noexcept {
  if (this != &other) {
    reset();
    swap(other);
  }
  return *this;
}

void PlacedBytes::reset() {
  if (!ledger_) return;
  if (scratch_) {
    ledger_->release_scratch(device_, Bytes(bytes_));
  } else {
    ledger_->release(device_, component_, Bytes(bytes_));
  }
  if (space_) {
    space_->deallocate(data_, bytes_);
  } else {
    std::free(data_);
  }
  ledger_ = nullptr;
  space_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

void PlacedBytes::swap(PlacedBytes& other) noexcept {
  std::swap(ledger_, other.ledger_);
  std::swap(device_, other.device_);
  std::swap(component_, other.component_);
  std::swap(space_, other.space_);
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  std::swap(scratch_, other.scratch_);
}

NumberBuffer::NumberBuffer(MemoryLedger& ledger, Device device, Component component,
                           NumberFormat format, std::size_t count)
    : format_(format),
      count_(count),
      memory_(ledger, device, component, count * element_bytes(format)) {}

Numbers NumberBuffer::view() const {
  if (format_ == NumberFormat::Fp32)
    return Numbers({static_cast<float*>(memory_.data()), count_}, memory_.space());
  return {{static_cast<std::uint16_t*>(memory_.data()), count_}, format_, memory_.space()};
}

void NumberBuffer::reset() {
  memory_.reset();
  count_ = 0;
}

namespace {

// A copy of numbers in the memory a communicator reads (host memory, or its device's space),
// filled from them (inputs) and written back to them (outputs).
class Staged {
 public:
  Staged(Numbers original, MemorySpace* place, bool fill) : original_(original), place_(place) {
    const auto bytes = std::size_t(original.bytes());
    if (place_) {
      data_ = place_->allocate(bytes);
    } else {
      host_.resize((bytes + sizeof(float) - 1) / sizeof(float));
      data_ = host_.data();
    }
    if (original.format() == NumberFormat::Fp32) {
      copy_ = Numbers({static_cast<float*>(data_), original.size()}, place_);
    } else {
      copy_ =
          Numbers({static_cast<std::uint16_t*>(data_), original.size()}, original.format(), place_);
    }
    if (fill) copy_bytes(copy_, original_);
  }
  ~Staged() {
    if (place_) place_->deallocate(data_, std::size_t(original_.bytes()));
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  Numbers numbers() const { return copy_; }
  void write_back() const { copy_bytes(original_, copy_); }

 private:
  Numbers original_, copy_;
  MemorySpace* place_ = nullptr;
  void* data_ = nullptr;
  std::vector<float> host_;  // float-aligned for either format
};

bool where_read(const Communicator& comm, Numbers numbers) {
  return numbers.size() == 0 || numbers.space() == comm.memory_space();
}

}  // namespace

namespace {

void all_reduce_direct(Communicator& comm, Numbers buffer) {
  if (buffer.format() == NumberFormat::Fp32) return comm.all_reduce_sum(buffer.wide());
  comm.all_reduce_sum(buffer.narrow(), wire_format(buffer.format()));
}

void reduce_scatter_direct(Communicator& comm, Numbers input, std::span<const int> counts,
                           Numbers output) {
  if (input.format() == NumberFormat::Fp32) {
    if (counts.empty()) return comm.reduce_scatter_sum(input.wide(), output.wide());
    return comm.reduce_scatter_sum(input.wide(), counts, output.wide());
  }
  if (counts.empty())
    return comm.reduce_scatter_sum(input.narrow(), output.narrow(), wire_format(input.format()));
  comm.reduce_scatter_sum(input.narrow(), counts, output.narrow(), wire_format(input.format()));
}

void all_gather_direct(Communicator& comm, Numbers input, Numbers output) {
  if (input.format() == NumberFormat::Fp32) return comm.all_gather(input.wide(), output.wide());
  comm.all_gather(input.narrow(), output.narrow());
}

void reduce_scatter_any(Communicator& comm, Numbers input, std::span<const int> counts,
                        Numbers output) {
  require_same_format(input, output, "reduce_scatter_sum");
  if (where_read(comm, input) && where_read(comm, output))
    return reduce_scatter_direct(comm, input, counts, output);
  const Staged staged_input(input, comm.memory_space(), /*fill=*/true);
  const Staged staged_output(output, comm.memory_space(), /*fill=*/false);
  reduce_scatter_direct(comm, staged_input.numbers(), counts, staged_output.numbers());
  staged_output.write_back();
}

}  // namespace

void all_reduce_sum(Communicator& comm, Numbers buffer) {
  if (where_read(comm, buffer)) return all_reduce_direct(comm, buffer);
  const Staged staged(buffer, comm.memory_space(), /*fill=*/true);
  all_reduce_direct(comm, staged.numbers());
  staged.write_back();
}

void reduce_scatter_sum(Communicator& comm, Numbers input, Numbers output) {
  reduce_scatter_any(comm, input, {}, output);
}

void reduce_scatter_sum(Communicator& comm, Numbers input, std::span<const int> counts,
                        Numbers output) {
  reduce_scatter_any(comm, input, counts, output);
}

// Staged, an in-place gather (input inside output) becomes an out-of-place one on the copies.
void all_gather(Communicator& comm, Numbers input, Numbers output) {
  require_same_format(input, output, "all_gather");
  if (where_read(comm, input) && where_read(comm, output))
    return all_gather_direct(comm, input, output);
  const Staged staged_input(input, comm.memory_space(), /*fill=*/true);
  const Staged staged_output(output, comm.memory_space(), /*fill=*/false);
  all_gather_direct(comm, staged_input.numbers(), staged_output.numbers());
  staged_output.write_back();
}

}  // namespace zerolens::exec
