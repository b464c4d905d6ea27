#include "sim/core/units.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace zerolens {

std::int64_t checked_mul(std::int64_t a, std::int64_t b) {
  if (a < 0 || b < 0) throw std::invalid_argument("checked_mul: negative operand");
  if (a != 0 && b > std::numeric_limits<std::int64_t>::max() / a) {
    throw std::overflow_error("value exceeds the 64-bit range");
  }
  return a * b;
}

const char* unit_name(SizeUnit unit) { return unit == SizeUnit::GB ? "GB" : "GiB"; }

std::string format_size_value(Bytes bytes, SizeUnit unit, int decimals) {
  const double divisor = unit == SizeUnit::GB ? double(kBytesPerGB) : double(kBytesPerGiB);
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, double(bytes) / divisor);
  return text;
}

std::string format_bytes(Bytes bytes, SizeUnit unit, int decimals) {
  return format_size_value(bytes, unit, decimals) + " " + unit_name(unit);
}

SizeUnit parse_size_unit(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (lower == "gb") return SizeUnit::GB;
  if (lower == "gib") return SizeUnit::GiB;
  throw std::invalid_argument("unknown size unit '" + text + "' (expected GB or GiB)");
}

std::string format_count(double count) {
  const char* suffix = "";
  double value = count;
  if (count >= 1e12) {
    value = count / 1e12, suffix = "T";
  } else if (count >= 1e9) {
    value = count / 1e9, suffix = "B";
  } else if (count >= 1e6) {
    value = count / 1e6, suffix = "M";
  } else if (count >= 1e3) {
    value = count / 1e3, suffix = "K";
  }
  char text[64];
  std::snprintf(text, sizeof text, value >= 100 ? "%.1f%s" : "%.2f%s", value, suffix);
  return text;
}

}  // namespace zerolens
