#include "exec/engine/quantized_messages.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/quantize.hpp"

namespace zerolens::exec {
namespace {

void require_sizes(const QuantizedLayout& layout, std::size_t values, std::size_t message) {
  if (values != layout.elements || message != layout.bytes()) {
    throw std::logic_error("quantized message of " + std::to_string(layout.elements) +
                           " elements (" + std::to_string(layout.bytes()) + " bytes) given " +
                           std::to_string(values) + " values and " + std::to_string(message) +
                           " bytes");
  }
}

}  // namespace

std::size_t QuantizedLayout::blocks() const {
  return kernels::quantization_blocks(elements, block);
}

std::size_t QuantizedLayout::code_bytes() const {
  return kernels::quantized_code_bytes(elements, bits);
}

QuantizedLayout quantized_layout(std::size_t elements, std::int64_t groups, int bits) {
  if (groups < 1) throw std::logic_error("a quantized message needs at least one group");
  const auto count = std::size_t(groups);
  const QuantizedLayout layout{.elements = elements,
                               .block = std::max<std::size_t>(1, (elements + count - 1) / count),
                               .bits = bits};
  if (layout.blocks() != count) {
    throw std::logic_error(std::to_string(elements) + " elements do not split into " +
                           std::to_string(groups) + " quantization groups");
  }
  return layout;
}

// The scales go through an aligned copy: a message may start at any byte.
void quantize_into(std::span<const float> values, const QuantizedLayout& layout,
                   std::span<std::byte> message) {
  require_sizes(layout, values.size(), message.size());
  std::vector<float> scales(layout.blocks());
  kernels::quantize_blocks(reinterpret_cast<std::uint8_t*>(message.data()), scales.data(),
                           values.data(), values.size(), layout.block, layout.bits);
  std::memcpy(message.data() + layout.code_bytes(), scales.data(), scales.size() * sizeof(float));
}

void dequantize_from(std::span<const std::byte> message, const QuantizedLayout& layout,
                     std::span<float> out, bool add) {
  require_sizes(layout, out.size(), message.size());
  std::vector<float> scales(layout.blocks());
  std::memcpy(scales.data(), message.data() + layout.code_bytes(), scales.size() * sizeof(float));
  const auto* codes = reinterpret_cast<const std::uint8_t*>(message.data());
  if (add) {
    kernels::dequantize_add_blocks(out.data(), codes, scales.data(), out.size(), layout.block,
                                   layout.bits);
  } else {
    kernels::dequantize_blocks(out.data(), codes, scales.data(), out.size(), layout.block,
                               layout.bits);
  }
}

}  // namespace zerolens::exec
