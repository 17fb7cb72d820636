// The cap holds for what no hook names. The driver holds memory for a process that no allocation
// call asked for: module globals, the malloc heap, printf FIFO and stack limits, local memory grown
// at a launch, and whatever a future API adds. Where NVML reports the process's device memory, the
// ledger is reconciled with it: what the driver holds beyond what libslice charged call by call
// becomes the process's overhead, charged to its tenant (never refused: the driver holds it
// already, so the next allocation is refused instead) and shown apart in slicectl status.
//
// When: at every compute watcher tick that is a second or more after the last (a process that
// launches kernels), before a refusal (at most every 100 ms), and before cuMemGetInfo (at most every
// second); never from inside NVML (its memory-info hooks answer from the figures reconciled last).
// Each look is a query of NVML, started once for the process (shim/nvml_use.h). Error: a
// measurement races the process's own
// allocations; charges come before the driver's allocation and go after its free, and the charged
// figure is read on both sides of the measurement, so a race can only make the overhead look
// smaller until the next reconciliation, never larger. Where NVML cannot see this process (its PID
// is not listed, as in some PID namespaces) nothing is charged and status says it is not measured.
#pragma once

#include <cstdint>

namespace slice::shim {

struct Session;

inline constexpr std::uint64_t kReconcileTickNs = 1'000'000'000;   // the watcher, and reports
inline constexpr std::uint64_t kReconcileRefusalNs = 100'000'000;  // before a refusal

// Reconciles `device` unless it was done within `max_age_ns`, or another thread is doing it.
// Returns true when the overhead went down (a refused request may fit now).
bool reconcile(Session& s, int device, std::uint64_t max_age_ns) noexcept;

}  // namespace slice::shim
