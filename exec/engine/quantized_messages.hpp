#pragma once
// ZeRO++'s quantized messages (internal to exec/): a run of fp32 values as int8 or int4 codes
// followed by one fp32 scale per block (kernels/quantize.hpp), one contiguous run of bytes as the
// byte collectives move it (qwZ's weight all-gather, qgZ's gradient all-to-alls).
#include <cstddef>
#include <cstdint>
#include <span>

namespace zerolens::exec {

struct QuantizedLayout {
  std::size_t elements = 0;
  std::size_t block = 1;  // elements per scale (the last block holds the rest)
  int bits = 8;
  std::size_t blocks() const;
  std::size_t code_bytes() const;
  std::size_t bytes() const { return code_bytes() + sizeof(float) * blocks(); }
};

// `groups` blocks over `elements`: blocks of ceil(elements / groups), which must make exactly
// `groups` of them (std::logic_error otherwise: the message would not be the schedule's size).
QuantizedLayout quantized_layout(std::size_t elements, std::int64_t groups, int bits);

// `message`: layout.bytes() bytes, any alignment.
void quantize_into(std::span<const float> values, const QuantizedLayout& layout,
                   std::span<std::byte> message);
// out = the dequantized message, or out += it (`add`: one rank's contribution to a sum).
void dequantize_from(std::span<const std::byte> message, const QuantizedLayout& layout,
                     std::span<float> out, bool add);

}  // namespace zerolens::exec
