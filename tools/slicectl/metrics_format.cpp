#include "metrics_format.h"

#include <charconv>
#include <cmath>

namespace slicectl {

namespace {

std::string escaped(std::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quote)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

std::string value_text(SampleValue v) {
  if (v.integer) return std::to_string(v.count);
  if (std::isnan(v.fraction)) return "NaN";
  if (std::isinf(v.fraction)) return v.fraction > 0 ? "+Inf" : "-Inf";
  // Never in the locale's form (no decimal comma).
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v.fraction);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string escape_label_value(std::string_view value) { return escaped(value, true); }

std::string escape_help(std::string_view text) { return escaped(text, false); }

void Exposition::family(std::string_view name, std::string_view type, std::string_view help) {
  out_.append("# HELP ").append(name).append(" ").append(escape_help(help)).append("\n");
  out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void Exposition::sample(std::string_view name, const Labels& labels, SampleValue value) {
  out_.append(name);
  if (!labels.empty()) {
    out_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_.append(labels[i].first).append("=\"").append(escape_label_value(labels[i].second)).append("\"");
    }
    out_ += '}';
  }
  out_.append(" ").append(value_text(value)).append("\n");
}

}  // namespace slicectl
