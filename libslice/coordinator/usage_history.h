// Metering for chargeback, the reading side: a tenant's cumulative counters on one device (device
// time received, memory held over time) as they are now and as its hourly samples had them, and
// what they were at a past moment, for `slicectl usage --since`. The file is not trusted: samples
// out of their place, out of order or ahead of the totals are left out.
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator_layout.h"

namespace slice {

// The cumulative counters at one moment (wall clock, ms since the epoch).
struct UsagePoint {
  std::uint64_t wall_ms = 0;
  std::uint64_t device_ns = 0;
  double memory_byte_seconds = 0;
};

// byte-ns -> byte-seconds.
double byte_seconds(unsigned __int128 byte_ns);

// The usable samples of a record, oldest first, each within its hour and the ring's span, and
// with counters that never go down nor pass `now` (the totals as read; its wall_ms ends the
// history).
std::vector<UsagePoint> usage_samples(const UsageRecord& record, const UsagePoint& now);

// The counters at `wall_ms`: interpolated linearly between the samples and `now` around it; the
// oldest sample's before it (or `now` when there is none), `now` from then on.
UsagePoint usage_at(const std::vector<UsagePoint>& samples, const UsagePoint& now, std::uint64_t wall_ms);

}  // namespace slice
