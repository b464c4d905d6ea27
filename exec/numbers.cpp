#include "exec/numbers.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <utility>

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

Precision wire_format(NumberFormat format) { return format == NumberFormat::Fp16 ? Precision::Fp16 : Precision::Bf16; }

void require_same_format(Numbers a, Numbers b, const char* what) {
  if (a.format() != b.format()) throw std::invalid_argument(std::string(what) + ": formats differ");
}

}  // namespace

NumberFormat format_of(Precision precision) {
  switch (precision) {
    case Precision::Fp32: return NumberFormat::Fp32;
    case Precision::Fp16: return NumberFormat::Fp16;
    case Precision::Bf16: return NumberFormat::Bf16;
  }
  return NumberFormat::Fp32;
}

std::size_t element_bytes(NumberFormat format) { return format == NumberFormat::Fp32 ? 4 : 2; }

Numbers Numbers::sub(std::size_t first, std::size_t count) const {
  if (format_ == NumberFormat::Fp32) return Numbers(wide_.subspan(first, count));
  return {narrow_.subspan(first, count), format_};
}

float Numbers::get(std::size_t i) const {
  switch (format_) {
    case NumberFormat::Fp32: return wide_[i];
    case NumberFormat::Fp16: return kernels::fp16_to_fp32(narrow_[i]);
    case NumberFormat::Bf16: return kernels::bf16_to_fp32(narrow_[i]);
  }
  return 0;
}

void Numbers::read(std::span<float> out) const {
  require_same_size(out.size(), size(), "Numbers::read");
  if (format_ == NumberFormat::Fp32) {
    std::copy(wide_.begin(), wide_.end(), out.begin());
  } else {
    widen_into(format_, narrow_.data(), out.data(), out.size());
  }
}

void Numbers::write(std::span<const float> in) const {
  require_same_size(in.size(), size(), "Numbers::write");
  if (format_ == NumberFormat::Fp32) {
    std::copy(in.begin(), in.end(), wide_.begin());
  } else {
    narrow_into(format_, in.data(), narrow_.data(), in.size());
  }
}

void Numbers::copy_from(Numbers source) const {
  require_same_size(source.size(), size(), "Numbers::copy_from");
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

void Numbers::fill_zero() const {
  std::fill(wide_.begin(), wide_.end(), 0.0f);
  std::fill(narrow_.begin(), narrow_.end(), std::uint16_t(0));  // +0 in fp16 and bf16
}

bool Numbers::has_inf_or_nan() const {
  if (format_ == NumberFormat::Fp32) return kernels::has_inf_or_nan(wide_.data(), wide_.size());
  // All exponent bits set: fp16 0x7c00, bf16 0x7f80.
  const std::uint16_t exponent = format_ == NumberFormat::Fp16 ? 0x7c00 : 0x7f80;
  return std::any_of(narrow_.begin(), narrow_.end(), [&](std::uint16_t bits) { return (bits & exponent) == exponent; });
}

double Numbers::sum_of_squares() const {
  double sum = 0;
  for (std::size_t i = 0; i < size(); ++i) sum += double(get(i)) * double(get(i));
  return sum;
}

NumberBuffer::NumberBuffer(MemoryLedger& ledger, Device device, Component component, NumberFormat format,
                           std::size_t count)
    : format_(format) {
  if (format == NumberFormat::Fp32) {
    wide_ = {ledger, device, component, count};
  } else {
    narrow_ = {ledger, device, component, count};
  }
}

float NumberBuffer::get(std::size_t i) const { return const_cast<NumberBuffer&>(*this).view().get(i); }

void NumberBuffer::read(std::size_t first, std::span<float> out) const {
  const_cast<NumberBuffer&>(*this).view(first, out.size()).read(out);
}

void NumberBuffer::reset() {
  wide_.reset();
  narrow_.reset();
}

ScratchFloats::ScratchFloats(MemoryLedger& ledger, Device device, std::size_t count)
    : ledger_(&ledger), device_(device), values_(count) {
  ledger_->allocate_scratch(device_, Bytes(count * sizeof(float)));
}

ScratchFloats::ScratchFloats(ScratchFloats&& other) noexcept
    : ledger_(std::exchange(other.ledger_, nullptr)), device_(other.device_), values_(std::move(other.values_)) {}

ScratchFloats& ScratchFloats::operator=(ScratchFloats&& other) noexcept {
  if (this != &other) {
    reset();
    ledger_ = std::exchange(other.ledger_, nullptr);
    device_ = other.device_;
    values_ = std::move(other.values_);
  }
  return *this;
}

void ScratchFloats::reset() {
  if (!ledger_) return;
  ledger_->release_scratch(device_, Bytes(values_.size() * sizeof(float)));
  ledger_ = nullptr;
  values_ = {};
}

void all_reduce_sum(Communicator& comm, Numbers buffer) {
  if (buffer.format() == NumberFormat::Fp32) return comm.all_reduce_sum(buffer.wide());
  comm.all_reduce_sum(buffer.narrow(), wire_format(buffer.format()));
}

void reduce_scatter_sum(Communicator& comm, Numbers input, Numbers output) {
  require_same_format(input, output, "reduce_scatter_sum");
  if (input.format() == NumberFormat::Fp32) return comm.reduce_scatter_sum(input.wide(), output.wide());
  comm.reduce_scatter_sum(input.narrow(), output.narrow(), wire_format(input.format()));
}

void reduce_scatter_sum(Communicator& comm, Numbers input, std::span<const int> counts, Numbers output) {
  require_same_format(input, output, "reduce_scatter_sum");
  if (input.format() == NumberFormat::Fp32) return comm.reduce_scatter_sum(input.wide(), counts, output.wide());
  comm.reduce_scatter_sum(input.narrow(), counts, output.narrow(), wire_format(input.format()));
}

void all_gather(Communicator& comm, Numbers input, Numbers output) {
  require_same_format(input, output, "all_gather");
  if (input.format() == NumberFormat::Fp32) return comm.all_gather(input.wide(), output.wide());
  comm.all_gather(input.narrow(), output.narrow());
}

}  // namespace zerolens::exec
