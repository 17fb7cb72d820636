// The user documentation of the SLICE_* variables, rendered from the same table that parsing
// reads (variables.inc), so the README and --help cannot drift from what libslice accepts.
#pragma once

#include <cstddef>
#include <string>

namespace slice {

// The README's table: a `| variable | meaning | default |` header, then one row per variable and
// one per per-device form (NAME_<n>, NAME_GPU_<uuid>). Ends with a newline.
std::string variables_markdown();

// The block that `slice-run --help` prints: a heading line, then per variable its name and meaning,
// and a line with its default and an example; wrapped to `width` columns, as plain text (markdown
// `code` marks removed).
std::string variables_help_text(std::size_t width = 100);

}  // namespace slice
