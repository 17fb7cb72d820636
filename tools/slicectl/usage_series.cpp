#include "usage_series.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace slicectl {

namespace {

// Samples of both, by time; at one time the live record's.
std::vector<slice::UsagePoint> merged(const std::vector<slice::UsagePoint>& live,
                                      const std::vector<slice::UsagePoint>& archived) {
  std::map<std::uint64_t, slice::UsagePoint> by_time;
  for (const slice::UsagePoint& p : archived) by_time[p.wall_ms] = p;
  for (const slice::UsagePoint& p : live) by_time[p.wall_ms] = p;
  std::vector<slice::UsagePoint> out;
  for (const auto& [wall, p] : by_time) out.push_back(p);
  return out;
}

}  // namespace

std::vector<UsageSeries> usage_series(const std::vector<slice::TenantView>& live,
                                      const std::vector<ArchivedRecord>& archived) {
  using Key = std::tuple<std::string, std::string>;  // tenant, GPU UUID
  std::map<Key, UsageSeries> series;
  std::map<Key, std::map<std::uint64_t, UsageSegment>> segments;  // by start
  for (const ArchivedRecord& a : archived) {
    UsageSeries& s = series[{a.tenant, a.uuid}];
    s.tenant = a.tenant;
    s.uuid = a.uuid;
    s.gpu_name = a.gpu_name;
    segments[{a.tenant, a.uuid}][a.segment.started_ms] = a.segment;
  }
  for (const slice::TenantView& t : live) {
    if (!t.readable) continue;
    for (const slice::TenantGpuView& g : t.gpus) {
      if (g.usage_started_ms == 0) continue;  // nothing recorded yet
      UsageSeries& s = series[{t.name, g.uuid}];
      s.tenant = t.name;
      s.uuid = g.uuid;
      s.gpu_name = g.name;
      s.live_processes = t.processes.size();
      UsageSegment& seg = segments[{t.name, g.uuid}][g.usage_started_ms];
      seg.samples = merged(g.usage_samples, seg.samples);
      seg.started_ms = g.usage_started_ms;
      seg.end = g.usage_now(t.read_wall_ms);
    }
  }
  std::vector<UsageSeries> out;
  for (auto& [key, s] : series) {
    for (auto& [start, seg] : segments[key]) s.segments.push_back(std::move(seg));
    out.push_back(std::move(s));
  }
  return out;
}

UsageOver usage_over(const UsageSeries& series, std::optional<std::uint64_t> since) {
  UsageOver u;
  bool first = true;
  for (const UsageSegment& seg : series.segments) {
    u.to_ms = std::max(u.to_ms, seg.end.wall_ms);
    if (since && *since >= seg.end.wall_ms) continue;  // all of it before the period
    const std::uint64_t from = since ? std::max(*since, seg.started_ms) : seg.started_ms;
    u.from_ms = first ? from : std::min(u.from_ms, from);
    first = false;
    slice::UsagePoint start{seg.started_ms, 0, 0};  // a record starts from nothing
    if (since && *since > seg.started_ms) {
      // Within the record: from its samples, with its start as the first of them.
      std::vector<slice::UsagePoint> known{start};
      for (const slice::UsagePoint& p : seg.samples)
        if (p.wall_ms > seg.started_ms) known.push_back(p);
      start = slice::usage_at(known, seg.end, *since);
      const std::uint64_t oldest = seg.samples.empty() ? seg.end.wall_ms : seg.samples.front().wall_ms;
      u.history_short = u.history_short || *since < oldest;
    }
    if (seg.end.device_ns > start.device_ns)
      u.device_seconds += static_cast<double>(seg.end.device_ns - start.device_ns) / 1e9;
    u.memory_byte_seconds += std::max(0.0, seg.end.memory_byte_seconds - start.memory_byte_seconds);
  }
  if (first) u.from_ms = u.to_ms;  // nothing in the period
  return u;
}

}  // namespace slicectl
