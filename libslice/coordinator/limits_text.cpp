#include "limits_text.h"

#include <cstdio>

#include "coordinator_layout.h"

namespace slice {

std::string describe_bytes(std::uint64_t bytes) {
  if (bytes == kNoLimit) return "none";
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  char s[32];
  if (u == 0)
    std::snprintf(s, sizeof s, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(s, sizeof s, "%.1f %s", v, units[u]);
  return s;
}

std::string limit_text(const std::optional<MemoryLimit>& limit) {
  if (!limit) return "none";
  char s[40];
  if (limit->form == MemoryLimit::Form::device_fraction) {
    // Billionths of the device: 250000000 -> "25%", 125000000 -> "12.5%".
    std::snprintf(s, sizeof s, "%u.%07u", limit->device_billionths / 10'000'000u,
                  limit->device_billionths % 10'000'000u);
    std::string t = s;
    while (t.back() == '0') t.pop_back();
    if (t.back() == '.') t.pop_back();
    return t + "%";
  }
  static const struct {
    const char* suffix;
    std::uint64_t size;
  } units[] = {{"Ti", 1ull << 40}, {"Gi", 1ull << 30}, {"Mi", 1ull << 20}, {"Ki", 1ull << 10}};
  for (const auto& u : units) {
    if (limit->bytes % u.size == 0) {
      std::snprintf(s, sizeof s, "%llu%s", static_cast<unsigned long long>(limit->bytes / u.size), u.suffix);
      return s;
    }
  }
  return std::to_string(limit->bytes);
}

std::uint64_t cap_on(const std::optional<MemoryLimit>& limit, std::uint64_t device_total) {
  return limit ? limit->bytes_on(device_total) : kNoLimit;
}

}  // namespace slice
