// slicectl usage across records (tools/slicectl/usage_series.cpp): a tenant's live record joined to
// the archived ones of the same tenant and GPU, and what was used over a period summed across them.
#include "usage_series.h"

#include <gtest/gtest.h>

namespace {

using slice::UsagePoint;
using slicectl::ArchivedRecord;
using slicectl::UsageSegment;
using slicectl::UsageSeries;

constexpr std::uint64_t kHourMs = 3'600'000;
constexpr std::uint64_t kT0 = 1'790'000'000'000;  // some wall-clock time, ms
constexpr const char* kGpu = "GPU-516d696d-6770-4075-8000-000000000000";

// A record that started at `start` and ran at `device_per_hour` s of device time and
// `bytes_held` bytes for `hours`, sampled every hour; its end at the last hour.
UsageSegment steady(std::uint64_t start, int hours, double device_per_hour, double bytes_held) {
  UsageSegment s;
  s.started_ms = start;
  for (int h = 0; h <= hours; ++h) {
    const UsagePoint p{start + h * kHourMs, static_cast<std::uint64_t>(h * device_per_hour * 1e9),
                       h * 3600 * bytes_held};
    if (h < hours)
      s.samples.push_back(p);
    else
      s.end = p;
  }
  return s;
}

slice::TenantView live_tenant(const std::string& name, const UsageSegment& seg, std::size_t processes) {
  slice::TenantView t;
  t.name = name;
  t.read_wall_ms = seg.end.wall_ms;
  t.processes.resize(processes);
  slice::TenantGpuView g;
  g.uuid = kGpu;
  g.name = "Simulated GPU";
  g.usage_started_ms = seg.started_ms;
  g.usage_samples = seg.samples;
  g.device_ns_total = seg.end.device_ns;
  g.memory_byte_seconds_total = seg.end.memory_byte_seconds;
  t.gpus.push_back(g);
  return t;
}

TEST(UsageSeries, ARecordBeforeARebootAndTheLiveOneAreSummed) {
  // Ten hours before a reboot (archived), then three since (live).
  const ArchivedRecord before{"team", kGpu, "Simulated GPU", steady(kT0, 10, 360, 1e9)};
  const UsageSegment after = steady(kT0 + 11 * kHourMs, 3, 720, 2e9);
  const auto series = slicectl::usage_series({live_tenant("team", after, 2)}, {before});
  ASSERT_EQ(series.size(), 1u);
  ASSERT_EQ(series[0].segments.size(), 2u);
  EXPECT_EQ(series[0].live_processes, 2u);

  const auto all = slicectl::usage_over(series[0], std::nullopt);
  EXPECT_DOUBLE_EQ(all.device_seconds, 10 * 360 + 3 * 720);
  EXPECT_DOUBLE_EQ(all.memory_byte_seconds, 10 * 3600 * 1e9 + 3 * 3600 * 2e9);
  EXPECT_EQ(all.from_ms, kT0);
  EXPECT_EQ(all.to_ms, after.end.wall_ms);

  // From hour 8 on: two hours of the old record (on its samples), and all of the new one.
  const auto since = slicectl::usage_over(series[0], kT0 + 8 * kHourMs);
  EXPECT_DOUBLE_EQ(since.device_seconds, 2 * 360 + 3 * 720);
  EXPECT_EQ(since.from_ms, kT0 + 8 * kHourMs);
  EXPECT_FALSE(since.history_short);

  // From the gap between the two (the machine was down): only the new record.
  const auto gap = slicectl::usage_over(series[0], kT0 + 10 * kHourMs + kHourMs / 2);
  EXPECT_DOUBLE_EQ(gap.device_seconds, 3 * 720);
  EXPECT_EQ(gap.from_ms, after.started_ms);
}

TEST(UsageSeries, TheLiveRecordWinsOverItsArchivedCopy) {
  // Archived at hour 2 of a record that is still live at hour 5: the live totals count, once.
  const UsageSegment live = steady(kT0, 5, 100, 0);
  UsageSegment archived = steady(kT0, 2, 100, 0);
  const auto series = slicectl::usage_series({live_tenant("team", live, 1)}, {{"team", kGpu, "old name", archived}});
  ASSERT_EQ(series.size(), 1u);
  ASSERT_EQ(series[0].segments.size(), 1u);
  EXPECT_EQ(series[0].gpu_name, "Simulated GPU");
  EXPECT_DOUBLE_EQ(slicectl::usage_over(series[0], std::nullopt).device_seconds, 500);
}

TEST(UsageSeries, ArchivedSamplesOlderThanTheLiveRingStillCount) {
  // The live ring kept only the last two hourly samples; the archive has the early ones.
  UsageSegment live = steady(kT0, 6, 60, 0);
  const UsageSegment archived = steady(kT0, 4, 60, 0);
  live.samples.erase(live.samples.begin(), live.samples.begin() + 4);
  const auto series = slicectl::usage_series({live_tenant("team", live, 1)}, {{"team", kGpu, "x", archived}});
  ASSERT_EQ(series[0].segments.size(), 1u);
  EXPECT_EQ(series[0].segments[0].samples.size(), 6u);
  const auto u = slicectl::usage_over(series[0], kT0 + kHourMs);
  EXPECT_DOUBLE_EQ(u.device_seconds, 5 * 60);
  EXPECT_FALSE(u.history_short);
}

TEST(UsageSeries, ATenantOnlyTheArchiveKnowsIsReported) {
  const auto series = slicectl::usage_series({}, {{"gone", kGpu, "Simulated GPU", steady(kT0, 2, 10, 1)}});
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(series[0].tenant, "gone");
  EXPECT_EQ(series[0].live_processes, 0u);
  EXPECT_DOUBLE_EQ(slicectl::usage_over(series[0], std::nullopt).device_seconds, 20);
  // A period after its last totals: nothing.
  const auto later = slicectl::usage_over(series[0], kT0 + 3 * kHourMs);
  EXPECT_DOUBLE_EQ(later.device_seconds, 0);
  EXPECT_DOUBLE_EQ(later.memory_byte_seconds, 0);
}

}  // namespace
