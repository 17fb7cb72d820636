#include "text_table.h"

#include <algorithm>

namespace slicectl {

std::string TextTable::render(const std::string& indent) const {
  std::vector<std::size_t> width(align_.size(), 0);
  for (const auto& row : rows_)
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < row.size() ? row[c] : "";
      const std::string pad(width[c] - cell.size(), ' ');
      if (c) line += "  ";
      line += align_[c] == Align::right ? pad + cell : cell + pad;
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

}  // namespace slicectl
