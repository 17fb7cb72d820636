// The compute scheduler's policy, with no clock, no driver and no shared memory in it: given what
// every tenant on one GPU received over the last window and whether it wants the device now, may
// this tenant submit work? Pure functions, so unit tests drive them with a fake clock and a
// simulated device (tests/unit/share_policy_test.cpp). What a tenant received over the window
// comes from its shared history (compute_board.h: received_over).
//
// The rules, in order:
//  1. Limit: a tenant that received more than its SLICE_COMPUTE_LIMIT of the window waits, even on
//     an idle device, and starts again only half a hysteresis below it.
//  2. Priority: while a tenant of a higher priority wants the device, lower ones wait (`low` only
//     gets time no `normal` or `high` tenant wants).
//  3. Share: among tenants of the same priority that want the device, the one furthest behind its
//     share runs; the others wait until it has caught up (within a small hysteresis). A tenant
//     alone, or beside idle ones, always runs: the policy is work-conserving.
//  4. Turns: a tenant waits while another of the same priority still has work on the device (a
//     tenant that was told to wait drains its short queue first). One tenant at a time makes the
//     time a tenant has work on the device the device time it receives: a GPU time-slicing between
//     contexts gives a context with a deeper queue more than its turn, so sharing the device
//     cannot be measured from outside, only avoided. A higher priority does not wait for turns.
// A tenant "wants" the device while it has work on it or work held back by libslice; one that is
// busy on the CPU between launches does not, so it never blocks the others.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "config_values.h"

namespace slice {

struct TenantLoad {
  std::uint32_t share = 100;  // percent, 1-100 (SLICE_COMPUTE_SHARE)
  std::uint32_t limit = 100;  // percent, 1-100 (SLICE_COMPUTE_LIMIT)
  Priority priority = Priority::normal;
  std::uint64_t received_ns = 0;  // device time received over the window
  bool wants = false;             // has work on the device, or held back
  bool active = false;            // has work on the device now
};

enum class Verdict { run, hold_for_limit, hold_for_priority, hold_for_share, hold_for_turn };
std::string_view to_string(Verdict v);

struct SharePolicy {
  std::uint64_t window_ns = 500'000'000;  // what "received" is measured over
  // How far ahead of the furthest-behind tenant (in ns of device time at a 100% share) a tenant may
  // run before it waits: each change of turns idles the device for a moment (the time it takes to
  // see that the last one drained), so turns last tens of ms; still small next to the window.
  std::uint64_t hysteresis_ns = 20'000'000;

  Verdict decide(const TenantLoad& me, std::span<const TenantLoad> others) const;
};

// A process's estimate of the device time it receives: a GPU without MPS runs one context at a
// time and time-slices between those that have work, so over a short step a process with work
// beside n-1 others that also have work receives 1/n of it.
class DeviceTimeEstimator {
 public:
  // Adds the step since the last call. `active_here`: this process had work on the device;
  // `active_total`: processes (this one included) that had work. `work_since_ns`: where it had none
  // at the step's start, when work came during the step (0: none came); the step is credited from
  // then. (A tenant whose gate reopens is idle at that tick and busy right after: without it, each
  // reopening would go uncredited, and a limit be overshot by as much.)
  void step(std::uint64_t now_ns, bool active_here, unsigned active_total, std::uint64_t work_since_ns = 0);
  std::uint64_t received_ns() const { return received_ns_; }

 private:
  std::uint64_t last_ns_ = 0;
  bool started_ = false;
  std::uint64_t received_ns_ = 0;
};

}  // namespace slice
