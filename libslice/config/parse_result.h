// The result of parsing one value: the value, or the reason it was refused.
//
// libslice runs inside programs we do not control, so parsers never throw: a caller checks the
// result and turns the reason into an error line that also names the variable and an example.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace slice {

template <typename T>
struct ParseResult {
  std::optional<T> value;  // engaged on success
  std::string reason;      // on failure: why, as a phrase ("unknown unit 'X'"), without the variable

  static ParseResult accept(T v) { return ParseResult{std::move(v), {}}; }
  static ParseResult refuse(std::string why) { return ParseResult{std::nullopt, std::move(why)}; }
  explicit operator bool() const { return value.has_value(); }
};

}  // namespace slice
