#pragma once
// The fuzz input as a JSON document, read by the strict reader every input file goes through
// (duplicate keys, NUL bytes, trailing text, numbers beyond a double are InputErrors).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/core/json_read.hpp"

namespace zerolens::fuzzing {

// The document, or nothing when the strict reader refuses the bytes.
inline std::optional<nlohmann::json> strict_document(const std::uint8_t* data, std::size_t size) {
  try {
    return json_read::parse_json_text(std::string(reinterpret_cast<const char*>(data), size),
                                      "fuzz");
  } catch (const InputError&) {
    return std::nullopt;
  }
}

}  // namespace zerolens::fuzzing
