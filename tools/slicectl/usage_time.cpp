#include "usage_time.h"

#include <time.h>

#include <cctype>
#include <cstdio>

namespace slice {

namespace {

// Reads exactly `digits` decimal digits at `at`.
bool number_at(std::string_view text, std::size_t at, std::size_t digits, int& out) {
  if (at + digits > text.size()) return false;
  out = 0;
  for (std::size_t i = at; i < at + digits; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
    out = out * 10 + (text[i] - '0');
  }
  return true;
}

ParseResult<std::uint64_t> parse_duration(std::string_view text, std::uint64_t now_ms) {
  std::uint64_t n = 0;
  std::size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    if (n > 1'000'000'000) return ParseResult<std::uint64_t>::refuse("the duration is too long");
    n = n * 10 + static_cast<std::uint64_t>(text[i] - '0');
  }
  if (i == 0 || i + 1 != text.size())
    return ParseResult<std::uint64_t>::refuse(
        "not a date (2026-11-30, 2026-11-30T14:00Z) nor a duration (90m, 24h, 7d)");
  std::uint64_t unit_s = 0;
  switch (text[i]) {
    case 's':
      unit_s = 1;
      break;
    case 'm':
      unit_s = 60;
      break;
    case 'h':
      unit_s = 3600;
      break;
    case 'd':
      unit_s = 86400;
      break;
    case 'w':
      unit_s = 7 * 86400;
      break;
    default:
      return ParseResult<std::uint64_t>::refuse(std::string("unknown unit '") + text[i] + "' (s, m, h, d or w)");
  }
  if (n == 0) return ParseResult<std::uint64_t>::refuse("a duration of zero covers nothing");
  const std::uint64_t back_ms = n * unit_s * 1000;
  if (back_ms > now_ms) return ParseResult<std::uint64_t>::refuse("that is before 1970");
  return ParseResult<std::uint64_t>::accept(now_ms - back_ms);
}

}  // namespace

ParseResult<std::uint64_t> parse_since(std::string_view text, std::uint64_t now_ms) {
  using R = ParseResult<std::uint64_t>;
  if (text.empty()) return R::refuse("an empty time");
  // A date starts with four digits and a dash; anything else is a duration.
  if (text.size() < 5 || text[4] != '-') return parse_duration(text, now_ms);
  std::string_view t = text;
  if (t.size() >= 3 && t.substr(t.size() - 3) == "UTC")
    t.remove_suffix(t.size() >= 4 && t[t.size() - 4] == ' ' ? 4 : 3);
  else if (!t.empty() && (t.back() == 'Z' || t.back() == 'z'))
    t.remove_suffix(1);
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  const bool date = t.size() >= 10 && number_at(t, 0, 4, year) && t[4] == '-' && number_at(t, 5, 2, month) &&
                    t[7] == '-' && number_at(t, 8, 2, day);
  bool ok = date && (t.size() == 10 || t.size() == 16 || t.size() == 19);
  if (ok && t.size() > 10)
    ok = (t[10] == 'T' || t[10] == 't' || t[10] == ' ') && number_at(t, 11, 2, hour) && t[13] == ':' &&
         number_at(t, 14, 2, minute) && (t.size() == 16 || (t[16] == ':' && number_at(t, 17, 2, second)));
  if (!ok) return R::refuse("not YYYY-MM-DD, YYYY-MM-DDTHH:MM or YYYY-MM-DDTHH:MM:SS (UTC, optionally with Z)");
  if (year < 1970 || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 59)
    return R::refuse("no such date or time");
  tm fields{};
  fields.tm_year = year - 1900;
  fields.tm_mon = month - 1;
  fields.tm_mday = day;
  fields.tm_hour = hour;
  fields.tm_min = minute;
  fields.tm_sec = second;
  const time_t seconds = timegm(&fields);
  // timegm moves an impossible day (February 30) on to a real one: compare what came back.
  if (seconds < 0 || fields.tm_mday != day || fields.tm_mon != month - 1) return R::refuse("no such date");
  const std::uint64_t ms = static_cast<std::uint64_t>(seconds) * 1000;
  if (ms > now_ms) return R::refuse("it is in the future");
  return R::accept(ms);
}

std::string utc_text(std::uint64_t wall_ms) {
  const time_t seconds = static_cast<time_t>(wall_ms / 1000);
  tm fields{};
  gmtime_r(&seconds, &fields);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ", fields.tm_year + 1900, fields.tm_mon + 1,
                fields.tm_mday, fields.tm_hour, fields.tm_min, fields.tm_sec);
  return buf;
}

}  // namespace slice
