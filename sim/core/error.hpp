#pragma once
// Errors for bad input. Every error names where the problem is (a JSON key path such as
// "zero_optimization.offload_param.device", a CLI flag, or a file) and why.
#include <stdexcept>
#include <string>
#include <vector>

namespace zerolens {

class InputError : public std::runtime_error {
 public:
  InputError(std::string where, const std::string& why)
      : std::runtime_error(where.empty() ? why : where + ": " + why), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// Non-fatal findings (unknown keys, ignored options) collected while parsing.
struct Diagnostics {
  std::vector<std::string> warnings;
  void warn(const std::string& where, const std::string& what) {
    warnings.push_back(where.empty() ? what : where + ": " + what);
  }
};

// Edit distance, for "did you mean" suggestions on unknown keys.
std::size_t edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `name`, or "" when none is reasonably close.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace zerolens
