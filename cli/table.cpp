#include "cli/table.hpp"

#include <algorithm>
#include <iomanip>

namespace zerolens::cli {

void Table::print(std::ostream& out, const std::string& indent) const {
  std::vector<std::size_t> widths(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  std::size_t total = 0;
  for (const auto width : widths) total += width + 2;
  auto print_row = [&](const std::vector<std::string>& row) {
    out << indent;
    for (std::size_t i = 0; i < widths.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : std::string();
      if (i == 0) {
        out << std::left << std::setw(int(widths[i])) << cell;
      } else if (last_left_ && i + 1 == widths.size()) {
        out << "  " << cell;  // no padding after the last column
      } else {
        out << "  " << std::right << std::setw(int(widths[i])) << cell;
      }
    }
    out << '\n';
  };
  print_row(header_);
  out << indent << std::string(total - 2, '-') << '\n';
  for (const auto& row : rows_) {
    if (row.empty()) {
      out << indent << std::string(total - 2, '-') << '\n';
    } else {
      print_row(row);
    }
  }
}

}  // namespace zerolens::cli
