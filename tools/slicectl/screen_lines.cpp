#include "screen_lines.h"

#include <algorithm>
#include <string_view>

namespace slicectl {

namespace {

// Bold colours that read on dark and light backgrounds alike: green, blue, magenta, cyan,
// yellow, red.
constexpr std::string_view kPalette[] = {"\x1b[1;32m", "\x1b[1;34m", "\x1b[1;35m",
                                         "\x1b[1;36m", "\x1b[1;33m", "\x1b[1;31m"};
constexpr std::string_view kReset = "\x1b[0m";
constexpr std::string_view kClearToEnd = "\x1b[K";

std::string colored(const ScreenLine& line, std::size_t columns) {
  const std::size_t width = std::min(line.text.size(), columns);
  std::string out;
  std::size_t at = 0;
  for (const ColorSpan& span : line.colors) {
    const std::size_t begin = std::max(span.begin, at), end = std::min(span.end, width);
    if (begin >= end) continue;
    out.append(line.text, at, begin - at);
    const std::size_t palette = sizeof kPalette / sizeof kPalette[0];
    out.append(kPalette[static_cast<std::size_t>(span.color) % palette]);
    out.append(line.text, begin, end - begin);
    out.append(kReset);
    at = end;
  }
  out.append(line.text, at, width - at);
  return out;
}

}  // namespace

std::string plain_text(const std::vector<ScreenLine>& lines, std::size_t columns) {
  std::string out;
  for (const ScreenLine& line : lines) out.append(line.text, 0, std::min(line.text.size(), columns)).append("\n");
  return out;
}

std::string screen_frame(const std::vector<ScreenLine>& lines, std::size_t columns, std::size_t rows, bool color) {
  std::vector<ScreenLine> shown(lines.begin(),
                                lines.begin() + static_cast<std::ptrdiff_t>(std::min(lines.size(), rows)));
  if (lines.size() > rows && rows > 0) {
    shown.back() = {"(" + std::to_string(lines.size() - rows + 1) + " more lines: a taller window shows them)", {}};
  }
  std::string out = "\x1b[H";
  for (std::size_t i = 0; i < shown.size(); ++i) {
    if (i) out += "\r\n";
    out += color ? colored(shown[i], columns) : shown[i].text.substr(0, columns);
    // A full line needs no clearing; clearing there could erase its last column, where the cursor waits.
    if (shown[i].text.size() < columns) out += kClearToEnd;
  }
  // Below the last line: cleared from the start of the next row (none when the screen is full).
  if (shown.size() < rows) out += "\r\n\x1b[J";
  return out;
}

}  // namespace slicectl
