#pragma once
// Integer flag checks whose messages name the flag, the accepted range and what was given
// (CLI11's PositiveNumber prints the range of a double: 300 digits).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace zerolens::cli {

// An integer from `min` to `max`; `phrase` says so in the message ("a positive integer").
inline CLI::Validator integer_in(std::int64_t min, std::int64_t max,
                                 const std::string& phrase = "") {
  const std::string expected =
      phrase.empty() ? "an integer from " + std::to_string(min) + " to " + std::to_string(max)
                     : phrase;
  return CLI::Validator(
      [min, max, expected](std::string& text) -> std::string {
        std::int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error != std::errc() || stop != end || value < min || value > max)
          return "must be " + expected + ", got '" + text + "'";
        return {};
      },
      phrase.empty() ? "INT in [" + std::to_string(min) + " - " + std::to_string(max) + "]" : "");
}

inline CLI::Validator positive_integer() {
  return integer_in(1, std::numeric_limits<std::int64_t>::max(), "a positive integer");
}

inline CLI::Validator non_negative_integer() {
  return integer_in(0, std::numeric_limits<std::int64_t>::max(), "an integer >= 0");
}

// A named value (a device, a precision) as people type it: any case, and the dtype names torch and
// Hugging Face use (bfloat16, float16, half, float32) where the names are zerolens's precisions.
// Leaves what it does not know for the membership check to name.
inline CLI::Validator canonical_names(const std::vector<std::string>& names) {
  return CLI::Validator(
      [names](std::string& text) -> std::string {
        std::string lower = text;
        for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
        static const std::pair<const char*, const char*> dtypes[] = {{"bfloat16", "bf16"},
                                                                     {"float16", "fp16"},
                                                                     {"half", "fp16"},
                                                                     {"float32", "fp32"},
                                                                     {"float", "fp32"}};
        for (const auto& [alias, name] : dtypes) {
          if (lower == alias && std::find(names.begin(), names.end(), name) != names.end())
            lower = name;
        }
        if (std::find(names.begin(), names.end(), lower) != names.end()) text = lower;
        return {};
      },
      "");
}

}  // namespace zerolens::cli
