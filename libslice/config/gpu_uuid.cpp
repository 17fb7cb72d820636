#include "gpu_uuid.h"

#include <algorithm>
#include <cstdio>

namespace slice {
namespace {

// The fixed shape of a UUID's text: where the separators are, and the hex digits between them.
constexpr std::string_view kUuidShape = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
char upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }

// `text` in kUuidShape with `separator` for '-' (and the prefix's case free); the canonical text.
std::optional<std::string> read_uuid(std::string_view text, char separator) {
  if (text.size() != kUuidShape.size()) return std::nullopt;
  std::string uuid;
  uuid.reserve(kUuidShape.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char want = kUuidShape[i];
    if (want == 'x') {
      if (!is_hex(c)) return std::nullopt;
      uuid += lower(c);
    } else if (want == '-') {
      if (c != separator) return std::nullopt;
      uuid += '-';
    } else {
      if (upper(c) != want) return std::nullopt;
      uuid += want;
    }
  }
  return uuid;
}

}  // namespace

std::string uuid_text(const std::uint8_t u[16]) {
  char s[48];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

std::optional<std::string> canonical_gpu_uuid(std::string_view text) { return read_uuid(text, '-'); }

std::optional<std::string> gpu_uuid_of_suffix(std::string_view suffix) {
  // The variable's own prefix is upper case, as every SLICE_* name is.
  if (!suffix.starts_with("GPU_")) return std::nullopt;
  return read_uuid(suffix, '_');
}

std::string gpu_uuid_suffix(std::string_view uuid) {
  std::string suffix(uuid);
  std::replace(suffix.begin(), suffix.end(), '-', '_');
  return suffix;
}

}  // namespace slice
