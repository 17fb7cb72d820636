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
// The same for a device of the running session, with its pools settled and dead processes' memory
// given back first.
SliceMemory slice_of(Session& s, int device, std::uint64_t device_total, std::uint64_t device_free);

}  // namespace slice::shim
