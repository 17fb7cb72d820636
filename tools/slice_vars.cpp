// slice-vars: prints the documentation of the SLICE_* variables from the table libslice parses.
//   slice-vars --markdown    the table in docs/configuration.md (tests/unit/variables_doc_test.cpp checks it)
//   slice-vars --help-text   the block that slice-run --help prints
#include <cstdio>
#include <string_view>

#include "variables_doc.h"

int main(int argc, char** argv) {
  const std::string_view mode = argc == 2 ? argv[1] : "";
  if (mode == "--markdown") {
    std::fputs(slice::variables_markdown().c_str(), stdout);
    return 0;
  }
  if (mode == "--help-text") {
    std::fputs(slice::variables_help_text().c_str(), stdout);
    return 0;
  }
  std::fputs("usage: slice-vars --markdown | --help-text\n", stderr);
  return 2;
}
