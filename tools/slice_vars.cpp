// slice-vars: prints the documentation of the SLICE_* variables from the table libslice parses.
//   slice-vars --markdown    the table in docs/configuration.md (tests/unit/variables_doc_test.cpp checks it)
//   slice-vars --help-text   the block that slice-run --help prints
#include <cstdio>
#include <string_view>

#include "variables_doc.h"

namespace {

const char kUsage[] =
    "usage: slice-vars --markdown | --help-text\n"
    "Prints the documentation of libslice's SLICE_* variables, from the table libslice parses.\n"
    "\n"
    "  --markdown   the variables as a Markdown table (the one in libslice's configuration.md)\n"
    "  --help-text  the same as plain text (the block that slice-run --help prints)\n"
    "  --help       this text\n"
    "Exit status: 0 done, 2 a wrong command line.\n";

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc == 2 ? argv[1] : "";
  if (mode == "--help" || mode == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (mode == "--markdown") {
    std::fputs(slice::variables_markdown().c_str(), stdout);
    return 0;
  }
  if (mode == "--help-text") {
    std::fputs(slice::variables_help_text().c_str(), stdout);
    return 0;
  }
  std::fputs(kUsage, stderr);
  return 2;
}
