#pragma once
// Integer flag checks whose messages name the flag, the accepted range and what was given
// (CLI11's PositiveNumber prints the range of a double: 300 digits).
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>

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

}  // namespace zerolens::cli
