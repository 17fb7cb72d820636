// slicectl usage --since: the dates and durations it accepts, and the ones it refuses.
#include "usage_time.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace slice {
namespace {

constexpr std::uint64_t kHourMs = 3'600'000;

TEST(SinceTime, DatesDurationsAndErrors) {
  const std::uint64_t now = 1'795'996'800'000 + 14 * kHourMs;  // 2026-11-30T14:00:00Z
  EXPECT_EQ(utc_text(now), "2026-11-30T14:00:00Z");
  const auto at = [&](const char* text) { return parse_since(text, now).value.value_or(1); };
  EXPECT_EQ(at("2026-11-30"), now - 14 * kHourMs);
  EXPECT_EQ(at("2026-11-30T13:00"), now - kHourMs);
  EXPECT_EQ(at("2026-11-30T13:00Z"), now - kHourMs);
  EXPECT_EQ(at("2026-11-30 13:00 UTC"), now - kHourMs);
  EXPECT_EQ(at("2026-11-30T13:59:30"), now - 30'000);
  EXPECT_EQ(at("2024-02-29"), 1'709'164'800'000u);
  EXPECT_EQ(at("90m"), now - 90 * 60'000);
  EXPECT_EQ(at("24h"), now - 24 * kHourMs);
  EXPECT_EQ(at("7d"), now - 7 * 24 * kHourMs);
  EXPECT_EQ(at("2w"), now - 14 * 24 * kHourMs);
  for (const char* bad :
       {"", "yesterday", "24", "24x", "0h", "-1h", "1.5h", "2026-11-31", "2025-02-29", "2026-13-01", "2026-11-30T25:00",
        "2026-11-30T14", "2026-11-30T14:00+01:00", "2026-12-01", "99999999999999d", "26-11-30"})
    EXPECT_FALSE(parse_since(bad, now)) << bad;
  EXPECT_NE(parse_since("2026-12-01", now).reason.find("future"), std::string::npos);
}

}  // namespace
}  // namespace slice
