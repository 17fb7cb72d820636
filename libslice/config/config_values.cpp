#include "config_values.h"

#include <algorithm>
#include <array>
#include <utility>

#include "printable.h"

namespace slice {
namespace {

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

// The enumerator whose name matches text, ignoring case.
template <typename Enum, std::size_t N>
ParseResult<Enum> parse_word(std::string_view text, const std::array<std::pair<std::string_view, Enum>, N>& words,
                             std::string_view expected) {
  for (const auto& [word, value] : words) {
    if (equals_ignoring_case(text, word)) return ParseResult<Enum>::accept(value);
  }
  return ParseResult<Enum>::refuse("must be " + std::string(expected));
}

constexpr std::array<std::pair<std::string_view, Priority>, 3> kPriorities{
    {{"high", Priority::high}, {"normal", Priority::normal}, {"low", Priority::low}}};

constexpr std::array<std::pair<std::string_view, LogLevel>, 6> kLogLevels{{{"off", LogLevel::off},
                                                                           {"error", LogLevel::error},
                                                                           {"warn", LogLevel::warn},
                                                                           {"info", LogLevel::info},
                                                                           {"debug", LogLevel::debug},
                                                                           {"trace", LogLevel::trace}}};

bool is_tenant_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

std::string too_long(std::size_t max) { return "longer than " + std::to_string(max) + " characters"; }

}  // namespace

ParseResult<Priority> parse_priority(std::string_view text) {
  return parse_word(text, kPriorities, "high, normal or low");
}

ParseResult<LogLevel> parse_log_level(std::string_view text) {
  return parse_word(text, kLogLevels, "off, error, warn, info, debug or trace");
}

ParseResult<std::string> parse_tenant_name(std::string_view text) {
  using R = ParseResult<std::string>;
  if (text.empty()) return R::refuse("empty value (for a unique name, unset the variable)");
  if (text.size() > kMaxTenantNameLength) return R::refuse(too_long(kMaxTenantNameLength));
  const auto bad = std::find_if_not(text.begin(), text.end(), is_tenant_char);
  if (bad != text.end()) {
    return R::refuse("'" + printable(std::string_view(&*bad, 1)) +
                     "' is not allowed: use letters, digits, '.', '_' and '-'");
  }
  if (text.front() == '.' || text.front() == '-') return R::refuse("must not start with '.' or '-'");
  return R::accept(std::string(text));
}

namespace {
// A control character in a path (a newline above all) would let a value write a line of its own
// choosing wherever libslice writes or logs the path (issue 29).
bool has_control_character(std::string_view text) {
  return std::any_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}
}  // namespace

ParseResult<std::string> parse_directory(std::string_view text) {
  using R = ParseResult<std::string>;
  if (text.empty()) return R::refuse("empty value");
  if (text.size() > kMaxPathLength) return R::refuse(too_long(kMaxPathLength));
  if (text.front() != '/') return R::refuse("must be an absolute path");
  if (has_control_character(text)) return R::refuse("must not hold a control character (a newline, a tab)");
  return R::accept(std::string(text));
}

ParseResult<std::string> parse_file(std::string_view text) {
  using R = ParseResult<std::string>;
  if (text.empty()) return R::refuse("empty value (for standard error, unset the variable)");
  if (text.size() > kMaxPathLength) return R::refuse(too_long(kMaxPathLength));
  if (has_control_character(text)) return R::refuse("must not hold a control character (a newline, a tab)");
  return R::accept(std::string(text));
}

ParseResult<bool> parse_flag(std::string_view text) {
  if (text.empty()) return ParseResult<bool>::accept(false);
  for (const std::string_view yes : {"1", "true", "yes"}) {
    if (equals_ignoring_case(text, yes)) return ParseResult<bool>::accept(true);
  }
  for (const std::string_view no : {"0", "false", "no"}) {
    if (equals_ignoring_case(text, no)) return ParseResult<bool>::accept(false);
  }
  return ParseResult<bool>::refuse("must be 1, 0, true, false, yes or no");
}

std::string_view to_string(Priority priority) {
  for (const auto& [word, value] : kPriorities) {
    if (value == priority) return word;
  }
  return "?";
}

std::string_view to_string(LogLevel level) {
  for (const auto& [word, value] : kLogLevels) {
    if (value == level) return word;
  }
  return "?";
}

}  // namespace slice
