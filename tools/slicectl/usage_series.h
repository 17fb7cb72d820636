// A tenant's metering on one GPU across the machine's restarts. Its live record (in its tenant file,
// usage_history.h) starts from zero whenever the file is made anew: after a reboot, or a `slicectl rm`.
// The archive (usage_archive.h) keeps the records that came before. A series is all of them, one
// segment per record; what was used over a period is the sum over the segments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator_view.h"
#include "usage_history.h"

namespace slicectl {

// One record: from its start (counters at zero) to its last known totals.
struct UsageSegment {
  std::uint64_t started_ms = 0;
  std::vector<slice::UsagePoint> samples;  // hourly, oldest first, each at most `end`
  slice::UsagePoint end;                   // the totals now (live) or when last archived
};

// A record as the archive holds it.
struct ArchivedRecord {
  std::string tenant, uuid, gpu_name;
  UsageSegment segment;
};

struct UsageSeries {
  std::string tenant, uuid, gpu_name;
  std::vector<UsageSegment> segments;  // by start
  std::size_t live_processes = 0;
};

// The live records and the archived ones, joined by tenant, GPU and record start (the live record
// wins where both hold one, with the archive's older samples added), sorted by tenant and GPU.
std::vector<UsageSeries> usage_series(const std::vector<slice::TenantView>& live,
                                      const std::vector<ArchivedRecord>& archived);

struct UsageOver {
  std::uint64_t from_ms = 0, to_ms = 0;  // the period the figures cover
  double device_seconds = 0;
  double memory_byte_seconds = 0;
  bool history_short = false;  // `since` falls in a record before its oldest sample: spread evenly there
};

// What the series used from `since` (or from its first record's start) to its last totals.
UsageOver usage_over(const UsageSeries& series, std::optional<std::uint64_t> since);

}  // namespace slicectl
