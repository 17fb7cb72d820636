#include "quantity.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "printable.h"

namespace slice {
namespace {

// 128 bits hold any integer part times any unit (< 2^64 * 2^60) exactly, so overflow is a
// comparison, never a rounding.
using Wide = unsigned __int128;

constexpr std::uint64_t kMaxBytes = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t kMaxFractionDigits = 18;        // 10^18 < 2^64: the fraction fits one word
constexpr std::size_t kMaxPercentFractionDigits = 7;  // 10^-7 % is one billionth of the device

struct Unit {
  std::string_view suffix;
  std::uint64_t multiplier;
};

constexpr std::uint64_t kKi = 1024, kK = 1000;
constexpr Unit kUnits[] = {
    {"", 1},
    {"Ki", kKi},
    {"Mi", kKi* kKi},
    {"Gi", kKi* kKi* kKi},
    {"Ti", kKi* kKi* kKi* kKi},
    {"Pi", kKi* kKi* kKi* kKi* kKi},
    {"Ei", kKi* kKi* kKi* kKi* kKi* kKi},
    {"KiB", kKi},
    {"MiB", kKi* kKi},
    {"GiB", kKi* kKi* kKi},
    {"TiB", kKi* kKi* kKi* kKi},
    {"PiB", kKi* kKi* kKi* kKi* kKi},
    {"EiB", kKi* kKi* kKi* kKi* kKi* kKi},
    {"k", kK},
    {"K", kK},
    {"M", kK* kK},
    {"G", kK* kK* kK},
    {"T", kK* kK* kK* kK},
    {"P", kK* kK* kK* kK* kK},
    {"E", kK* kK* kK* kK* kK* kK},
    {"KB", kK},
    {"MB", kK* kK},
    {"GB", kK* kK* kK},
    {"TB", kK* kK* kK* kK},
    {"PB", kK* kK* kK* kK* kK},
    {"EB", kK* kK* kK* kK* kK* kK},
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Not std::isspace: its answer depends on the locale, and a value's meaning must not.
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

std::uint64_t power_of_ten(std::size_t exponent) {
  std::uint64_t p = 1;
  while (exponent-- > 0) p *= 10;
  return p;
}

// Decimal digits to an integer; nullopt when the value does not fit 64 bits.
std::optional<std::uint64_t> digits_value(std::string_view digits) {
  std::uint64_t v = 0;
  for (const char c : digits) {
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (kMaxBytes - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

// A value split into the decimal number it starts with and the unit after it.
struct DecimalNumber {
  std::string_view integer_digits;   // at least one digit
  std::string_view fraction_digits;  // digits after the point; empty when there is no point
  std::string_view unit;             // everything after the number
};

// The checks that every numeric form shares.
ParseResult<DecimalNumber> split_decimal(std::string_view text) {
  using R = ParseResult<DecimalNumber>;
  if (text.empty()) return R::refuse("empty value");
  if (std::any_of(text.begin(), text.end(), is_space)) return R::refuse("whitespace is not allowed");
  if (text.front() == '-') return R::refuse("negative values are not allowed");
  if (text.front() == '+') return R::refuse("a sign is not allowed");
  if (text.size() >= 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    return R::refuse("hexadecimal is not accepted");
  }
  if (std::count(text.begin(), text.end(), '.') > 1) return R::refuse("more than one decimal point");

  std::size_t end = 0;
  while (end < text.size() && is_digit(text[end])) ++end;
  if (end == 0) {
    return R::refuse(text.front() == '.' ? "a digit must come before the decimal point" : "not a number");
  }
  DecimalNumber number{text.substr(0, end), {}, {}};
  if (end < text.size() && text[end] == '.') {
    const std::size_t first = end + 1;
    end = first;
    while (end < text.size() && is_digit(text[end])) ++end;
    if (end == first) return R::refuse("a digit must follow the decimal point");
    number.fraction_digits = text.substr(first, end - first);
  }
  number.unit = text.substr(end);
  // "1E" is an exabyte, so only E followed by a digit or sign is taken for an exponent.
  const auto& unit = number.unit;
  if (unit.size() >= 2 && (unit[0] == 'e' || unit[0] == 'E') &&
      (is_digit(unit[1]) || unit[1] == '+' || unit[1] == '-')) {
    return R::refuse("exponent notation is not accepted");
  }
  return R::accept(number);
}

std::string overflow_reason() { return "more than " + std::to_string(kMaxBytes) + " bytes (2^64 - 1)"; }

// number × multiplier, rounded down: integer part and fraction each multiplied exactly.
ParseResult<std::uint64_t> bytes_of(const DecimalNumber& number, std::uint64_t multiplier) {
  using R = ParseResult<std::uint64_t>;
  if (number.fraction_digits.size() > kMaxFractionDigits) {
    return R::refuse("more than " + std::to_string(kMaxFractionDigits) + " digits after the decimal point");
  }
  const auto integer = digits_value(number.integer_digits);
  if (!integer) return R::refuse(overflow_reason());
  const std::uint64_t fraction = *digits_value(number.fraction_digits);  // < 10^18, always fits
  const Wide total =
      Wide{*integer} * multiplier + Wide{fraction} * multiplier / power_of_ten(number.fraction_digits.size());
  if (total > kMaxBytes) return R::refuse(overflow_reason());
  return R::accept(static_cast<std::uint64_t>(total));
}

ParseResult<std::uint64_t> bytes_with_unit(const DecimalNumber& number) {
  for (const Unit& unit : kUnits) {
    if (unit.suffix == number.unit) return bytes_of(number, unit.multiplier);
  }
  return ParseResult<std::uint64_t>::refuse(
      "unknown unit '" + printable(number.unit, 16) +
      "' (binary: Ki Mi Gi Ti Pi Ei or KiB MiB GiB TiB PiB EiB; decimal: k K M G T P E or KB MB GB TB PB EB)");
}

// A percentage of the device, in billionths of it.
ParseResult<std::uint32_t> device_billionths_of(const DecimalNumber& number) {
  using R = ParseResult<std::uint32_t>;
  if (number.fraction_digits.size() > kMaxPercentFractionDigits) {
    return R::refuse("more than " + std::to_string(kMaxPercentFractionDigits) +
                     " digits after the decimal point in a percentage");
  }
  const auto percent = digits_value(number.integer_digits);
  if (!percent || *percent > 100) return R::refuse("a percentage of the device is at most 100%");
  const std::uint64_t billionths =
      *percent * power_of_ten(kMaxPercentFractionDigits) +
      *digits_value(number.fraction_digits) * power_of_ten(kMaxPercentFractionDigits - number.fraction_digits.size());
  if (billionths == 0) return R::refuse("a percentage of the device must be more than 0%");
  if (billionths > MemoryLimit::kWholeDevice) return R::refuse("a percentage of the device is at most 100%");
  return R::accept(static_cast<std::uint32_t>(billionths));
}

}  // namespace

std::uint64_t MemoryLimit::bytes_on(std::uint64_t device_total_bytes) const {
  if (form == Form::bytes) return bytes;
  return static_cast<std::uint64_t>(Wide{device_total_bytes} * device_billionths / kWholeDevice);
}

ParseResult<std::uint64_t> parse_byte_quantity(std::string_view text) {
  const auto number = split_decimal(text);
  if (!number) return ParseResult<std::uint64_t>::refuse(number.reason);
  if (number.value->unit == "%") return ParseResult<std::uint64_t>::refuse("a percentage is not allowed here");
  return bytes_with_unit(*number.value);
}

ParseResult<MemoryLimit> parse_memory_limit(std::string_view text) {
  using R = ParseResult<MemoryLimit>;
  const auto number = split_decimal(text);
  if (!number) return R::refuse(number.reason);
  if (number.value->unit == "%") {
    const auto billionths = device_billionths_of(*number.value);
    if (!billionths) return R::refuse(billionths.reason);
    return R::accept(MemoryLimit::of_device_billionths(*billionths.value));
  }
  const auto bytes = bytes_with_unit(*number.value);
  if (!bytes) return R::refuse(bytes.reason);
  if (*bytes.value == 0) return R::refuse("the cap must be at least 1 byte (for no cap, unset the variable)");
  return R::accept(MemoryLimit::of_bytes(*bytes.value));
}

ParseResult<unsigned> parse_percent(std::string_view text) {
  using R = ParseResult<unsigned>;
  if (text == "%") return R::refuse("a number must come before '%'");
  if (!text.empty() && text.back() == '%') text.remove_suffix(1);
  const auto number = split_decimal(text);
  if (!number) return R::refuse(number.reason);
  if (!number.value->fraction_digits.empty()) return R::refuse("must be a whole percent, without a decimal point");
  if (!number.value->unit.empty()) return R::refuse("must be a whole percent from 1 to 100");
  const auto percent = digits_value(number.value->integer_digits);
  if (!percent || *percent < 1 || *percent > 100) return R::refuse("must be from 1 to 100");
  return R::accept(static_cast<unsigned>(*percent));
}

}  // namespace slice
