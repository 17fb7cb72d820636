// A small JSON writer for slicectl's output. Strings may hold any bytes (a tenant writes the text
// fields of its own file): quotes, backslashes and control bytes are escaped, valid UTF-8 passes
// through, and each byte that is not valid UTF-8 becomes U+FFFD, so the output always parses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace slicectl {

// `text` as a quoted JSON string.
std::string json_string(std::string_view text);

class JsonWriter {
 public:
  void begin_object();
  void end_object();
  void begin_array();
  void end_array();
  void key(std::string_view name);  // in an object, before each value
  void string(std::string_view text);
  void number(std::uint64_t n);
  void number(std::int64_t n);
  void number_or_null(std::optional<std::uint64_t> n);
  void decimal(double x);  // a non-finite value is written as null
  void decimal_or_null(std::optional<double> x);
  void boolean(bool b);
  void null();

  const std::string& text() const { return out_; }

 private:
  void before_value();
  std::string out_;
  std::vector<bool> has_items_;  // per open object or array
  bool after_key_ = false;
};

}  // namespace slicectl
