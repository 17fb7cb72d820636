#include "usage_history.h"

#include <algorithm>

namespace slice {

double byte_seconds(unsigned __int128 byte_ns) { return static_cast<double>(byte_ns) / 1e9; }

std::vector<UsagePoint> usage_samples(const UsageRecord& record, const UsagePoint& now) {
  constexpr std::uint64_t step_ms = kUsageStepSeconds * 1000;
  const std::uint64_t newest = record.newest_step.load();
  std::vector<UsagePoint> found;
  for (int i = 0; i < kUsageSamples; ++i) {
    const UsageSample& s = record.samples[i];
    const std::uint64_t wall = s.wall_ms.load();
    const UsagePoint p{wall, s.device_ns.load(),
                       byte_seconds(static_cast<unsigned __int128>(s.memory_units.load()) << kMemoryUnitShift)};
    if (wall != s.wall_ms.load() || wall == 0 || wall > now.wall_ms) continue;  // being written, or ahead
    // Its own place in the ring, and not one the ring has gone round since.
    const std::uint64_t step = wall / step_ms;
    if (step % kUsageSamples != static_cast<std::uint64_t>(i) || step > newest || step + kUsageSamples <= newest)
      continue;
    found.push_back(p);
  }
  std::sort(found.begin(), found.end(), [](const UsagePoint& a, const UsagePoint& b) { return a.wall_ms < b.wall_ms; });
  // Cumulative counters never go down: a sample below an earlier one, or above the totals now, is
  // not to be believed.
  std::vector<UsagePoint> kept;
  for (const UsagePoint& p : found) {
    if (p.device_ns > now.device_ns || p.memory_byte_seconds > now.memory_byte_seconds) continue;
    if (!kept.empty() &&
        (p.device_ns < kept.back().device_ns || p.memory_byte_seconds < kept.back().memory_byte_seconds))
      continue;
    kept.push_back(p);
  }
  return kept;
}

UsagePoint usage_at(const std::vector<UsagePoint>& samples, const UsagePoint& now, std::uint64_t wall_ms) {
  if (wall_ms >= now.wall_ms) return now;
  if (samples.empty()) return now;  // nothing known before now: nothing counted since
  if (wall_ms <= samples.front().wall_ms) return samples.front();
  // The two known points around it: samples, then now.
  std::size_t next = 1;
  while (next < samples.size() && samples[next].wall_ms < wall_ms) ++next;
  const UsagePoint& a = samples[next - 1];
  const UsagePoint& b = next < samples.size() ? samples[next] : now;
  if (b.wall_ms <= a.wall_ms) return a;
  const double f = static_cast<double>(wall_ms - a.wall_ms) / static_cast<double>(b.wall_ms - a.wall_ms);
  UsagePoint p;
  p.wall_ms = wall_ms;
  p.device_ns = a.device_ns + static_cast<std::uint64_t>(f * static_cast<double>(b.device_ns - a.device_ns));
  p.memory_byte_seconds = a.memory_byte_seconds + f * (b.memory_byte_seconds - a.memory_byte_seconds);
  return p;
}

}  // namespace slice
