#include "json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace slicectl {

namespace {

// Length of the valid UTF-8 sequence at the start of `s`, or 0 when it is not one (overlong forms,
// surrogates and code points past U+10FFFF are not valid).
std::size_t utf8_length(std::string_view s) {
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](std::size_t i, unsigned lo = 0x80, unsigned hi = 0xbf) {
    return i < s.size() && b(i) >= lo && b(i) <= hi;
  };
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c == 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
  if (c == 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
  if (c >= 0xe1 && c <= 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xf1 && c <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

}  // namespace

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
      ++i;
    } else if (const std::size_t n = utf8_length(text.substr(i))) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  return out + "\"";
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_items_.empty()) {
    if (has_items_.back()) out_ += ',';
    has_items_.back() = true;
  }
}

void JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  has_items_.push_back(false);
}

void JsonWriter::end_object() {
  out_ += '}';
  has_items_.pop_back();
}

void JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  has_items_.push_back(false);
}

void JsonWriter::end_array() {
  out_ += ']';
  has_items_.pop_back();
}

void JsonWriter::key(std::string_view name) {
  before_value();
  out_ += json_string(name);
  out_ += ':';
  after_key_ = true;
}

void JsonWriter::string(std::string_view text) {
  before_value();
  out_ += json_string(text);
}

void JsonWriter::number(std::uint64_t n) {
  before_value();
  out_ += std::to_string(n);
}

void JsonWriter::number(std::int64_t n) {
  before_value();
  out_ += std::to_string(n);
}

void JsonWriter::number_or_null(std::optional<std::uint64_t> n) {
  if (n) number(*n);
  else null();
}

void JsonWriter::decimal(double x) {
  if (!std::isfinite(x)) return null();  // JSON has no NaN or infinity
  before_value();
  // The shortest text that reads back as the same double (0.237, not 0.23699999999999999), and
  // never in the locale's form (no decimal comma).
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  out_.append(buf, r.ptr);
}

void JsonWriter::decimal_or_null(std::optional<double> x) {
  if (x) decimal(*x);
  else null();
}

void JsonWriter::boolean(bool b) {
  before_value();
  out_ += b ? "true" : "false";
}

void JsonWriter::null() {
  before_value();
  out_ += "null";
}

}  // namespace slicectl
