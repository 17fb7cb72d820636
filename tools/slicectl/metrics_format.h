// The Prometheus text exposition format (version 0.0.4): families with their # HELP and # TYPE
// lines, samples with escaped label values. Knows nothing of slices; metrics_families.cpp does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace slicectl {

// A sample's value: byte and process counts are written as exact integers (a double would round
// anything above 2^53), fractions as the shortest decimal that reads back as the same double.
struct SampleValue {
  bool integer = true;
  std::uint64_t count = 0;
  double fraction = 0;

  static SampleValue of(std::uint64_t n) { return {true, n, 0}; }
  static SampleValue of(double x) { return {false, 0, x}; }
};

using Labels = std::vector<std::pair<std::string_view, std::string>>;  // name, raw value

// A label value as the format writes it between quotes: \ " and newline escaped.
std::string escape_label_value(std::string_view value);
// A # HELP text: \ and newline escaped.
std::string escape_help(std::string_view text);

class Exposition {
 public:
  // Starts a family; every sample until the next family() must carry its name. `type` is
  // "gauge", "counter" or "untyped".
  void family(std::string_view name, std::string_view type, std::string_view help);
  void sample(std::string_view name, const Labels& labels, SampleValue value);

  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// The Content-Type of a text exposition served over HTTP.
inline constexpr const char* kExpositionContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace slicectl
