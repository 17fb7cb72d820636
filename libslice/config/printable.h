// Shows text that came from the environment inside a one-line message.
//
// A variable's value can hold anything a shell can put there (newlines, escape sequences, a
// megabyte of bytes), and an error line must stay one line that a terminal shows as it is.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace slice {

// Printable ASCII stays as it is, except that ' and \ get a backslash; every other byte becomes
// \xNN. Text longer than max_bytes is cut there and "..." appended.
std::string printable(std::string_view text, std::size_t max_bytes = 96);

}  // namespace slice
