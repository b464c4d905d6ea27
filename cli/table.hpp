#pragma once
// A plain text table: first column left-aligned, the others right-aligned.
#include <ostream>
#include <string>
#include <vector>

namespace zerolens::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void add_separator() { rows_.push_back({}); }
  // The last column left-aligned (free text such as a verdict) instead of right-aligned.
  void align_last_left() { last_left_ = true; }
  void print(std::ostream& out, const std::string& indent = "  ") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;  // an empty row prints a separator line
  bool last_left_ = false;
};

}  // namespace zerolens::cli
