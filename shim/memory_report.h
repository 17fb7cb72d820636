// The memory a process is shown: its slice of the device.
#pragma once

#include <cstdint>

#include "session.h"

namespace slice::shim {

struct SliceMemory {
  std::uint64_t total = 0;
  std::uint64_t free = 0;
  bool capped = false;  // false: the device's own figures
};

// total = min(cap, device total), free = min(device free, cap - usage) and never below zero.
SliceMemory clamp_to_cap(std::uint64_t device_total, std::uint64_t device_free, std::uint64_t cap, std::uint64_t usage);
// The same for a device of the running session, with dead processes' memory given back first, and
// (settle_and_reconcile) its pools settled and the driver's own figure reconciled. NVML's hooks take
// the figures only: no driver call and no NVML look from inside NVML, whose thread the call may be.
enum class SliceLook { settle_and_reconcile, figures_only };
SliceMemory slice_of(Session& s, int device, std::uint64_t device_total, std::uint64_t device_free,
                     SliceLook look = SliceLook::settle_and_reconcile);

}  // namespace slice::shim
