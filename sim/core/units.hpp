#pragma once
// Units used everywhere in zerolens: every figure has one unit and one name.
//   bytes    -> Bytes (signed 64-bit; models reach 1e14 parameters, clusters 1e5 ranks)
//   elements -> Elements (signed 64-bit count of tensor elements)
//   seconds  -> double, flops -> double (floating point operations, not per second)
#include <cstdint>
#include <string>

namespace zerolens {

using Bytes = std::int64_t;
using Elements = std::int64_t;

inline constexpr Bytes kBytesPerGB = 1'000'000'000;   // decimal gigabyte (GB = 1e9 bytes)
inline constexpr Bytes kBytesPerGiB = Bytes{1} << 30;  // binary gibibyte (GiB = 2^30 bytes)

enum class SizeUnit { GB, GiB };

// Integer ceiling division for non-negative a and positive b.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Multiplies two non-negative 64-bit values, throwing std::overflow_error on overflow.
std::int64_t checked_mul(std::int64_t a, std::int64_t b);

// "12.34 GB" / "11.49 GiB" with the unit named explicitly.
std::string format_bytes(Bytes bytes, SizeUnit unit, int decimals = 2);
// Plain number of the unit, for tables: "12.34".
std::string format_size_value(Bytes bytes, SizeUnit unit, int decimals = 2);
const char* unit_name(SizeUnit unit);
// Parses "GB" / "GiB" (case-insensitive); throws std::invalid_argument otherwise.
SizeUnit parse_size_unit(const std::string& text);

// Human count of parameters: "124.4M", "1.56B", "1.00T".
std::string format_count(double count);

}  // namespace zerolens
