#include "share_policy.h"

#include <algorithm>

namespace slice {
namespace {

// Device time received, as if the tenant's share were 100%: comparable between tenants.
std::uint64_t normalized(const TenantLoad& t) { return t.received_ns * 100 / std::max<std::uint32_t>(t.share, 1); }

}  // namespace

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::run:
      return "run";
    case Verdict::hold_for_limit:
      return "hold (limit)";
    case Verdict::hold_for_priority:
      return "hold (priority)";
    case Verdict::hold_for_share:
      return "hold (share)";
    case Verdict::hold_for_turn:
      return "hold (turn)";
  }
  return "?";
}

Verdict SharePolicy::decide(const TenantLoad& me, std::span<const TenantLoad> others) const {
  // On the device, a tenant goes on up to its limit; off it, it starts again only once it is half a
  // hysteresis below (the others stop waiting for it within a hysteresis of it): turns around a
  // limit then last ms, not one kernel each, and every change of turns idles the device.
  const std::uint64_t start_margin = me.active ? 0 : hysteresis_ns / 2;
  if (me.limit < 100 && (me.received_ns + start_margin) * 100 > static_cast<std::uint64_t>(me.limit) * window_ns)
    return Verdict::hold_for_limit;
  const int mine = priority_rank(me.priority);
  for (const TenantLoad& o : others)
    if (o.wants && priority_rank(o.priority) > mine) return Verdict::hold_for_priority;
  const std::uint64_t me_n = normalized(me);
  for (const TenantLoad& o : others) {
    if (!o.wants || priority_rank(o.priority) != mine) continue;
    // A tenant at (or within the hysteresis of) its own limit does not want time it may not take:
    // never wait for it, or turns would change at every kernel around its limit.
    if (o.limit < 100 && (o.received_ns + hysteresis_ns) * 100 > static_cast<std::uint64_t>(o.limit) * window_ns)
      continue;
    if (me_n > normalized(o) + hysteresis_ns) return Verdict::hold_for_share;
  }
  if (!me.active)
    for (const TenantLoad& o : others)
      if (o.active && priority_rank(o.priority) == mine) return Verdict::hold_for_turn;
  return Verdict::run;
}

void DeviceTimeEstimator::step(std::uint64_t now_ns, bool active_here, unsigned active_total,
                               std::uint64_t work_since_ns) {
  const std::uint64_t from = active_here ? last_ns_ : work_since_ns;
  if (started_ && now_ns > from && (active_here || from > last_ns_))
    received_ns_ += (now_ns - from) / std::max(active_total, 1u);
  started_ = true;
  last_ns_ = now_ns;
}

}  // namespace slice
