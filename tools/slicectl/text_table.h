// Columns aligned for a terminal: each column as wide as its widest cell, numbers right-aligned.
// Cells must be printable ASCII (see shown() in cli.h), so one byte is one column.
#pragma once

#include <string>
#include <vector>

namespace slicectl {

class TextTable {
 public:
  enum class Align { left, right };
  explicit TextTable(std::vector<Align> columns) : align_(std::move(columns)) {}

  // Fewer cells than columns leave the rest empty.
  void add(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  // Every row, each prefixed by `indent` and without trailing spaces, one per line.
  std::string render(const std::string& indent) const;

 private:
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace slicectl
