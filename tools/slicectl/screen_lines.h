// Lines of text for the terminal with coloured stretches, cut to the window's width before any
// escape sequence is added, so that a line never wraps. Text is printable ASCII (shown() in
// cli.h): one byte is one column.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace slicectl {

struct ColorSpan {
  std::size_t begin = 0, end = 0;  // columns [begin, end)
  int color = 0;                   // an index into the palette (any number: it wraps round)
};

struct ScreenLine {
  std::string text;
  std::vector<ColorSpan> colors;  // in order, not overlapping
};

// The lines cut to `columns`, each ended by "\n": no escape sequence (output that is not a terminal).
std::string plain_text(const std::vector<ScreenLine>& lines, std::size_t columns);

// One frame for a terminal of columns x rows: from the top left, each line cut to the width,
// coloured (unless !color) and cleared to its end, the rest of the screen cleared. When there
// are more lines than rows, the last row says how many were left out.
std::string screen_frame(const std::vector<ScreenLine>& lines, std::size_t columns, std::size_t rows, bool color);

}  // namespace slicectl
