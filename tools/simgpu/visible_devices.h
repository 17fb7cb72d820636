// Which physical devices a process sees, and in which order: CUDA_DEVICE_ORDER and
// CUDA_VISIBLE_DEVICES as the CUDA driver applies them (CUDA Programming Guide, "CUDA Environment
// Variables"; what it leaves unsaid follows what is observed of real drivers):
// - CUDA_DEVICE_ORDER: FASTEST_FIRST (the default, and for any other value) puts the fastest device
//   first (here: most multiprocessors), ties in PCI bus order; PCI_BUS_ID orders by PCI bus ID.
// - CUDA_VISIBLE_DEVICES unset: every device, in that order. Set: a comma-separated list whose
//   entries are ordinals into that order (leading whitespace and a '+' ignored; what follows the
//   leading digits is ignored too), or UUIDs, with or without the "GPU-" prefix, or a prefix of one
//   that names exactly one device (without the prefix, one that starts with a letter: what starts
//   with a digit is an ordinal, unless it is a whole UUID). The list is cut at the first entry that names no device (an
//   ordinal past the end, a negative number, an unknown or ambiguous UUID, a MIG device). A device
//   named twice makes the whole list name none. Empty: no device.
// Device ordinals (CUdevice) are positions in the result; NVML does not read these variables and
// keeps numbering devices physically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace simgpu {

struct PhysicalDevice {
  std::string uuid;  // "GPU-..."
  unsigned pci_bus = 0;
  std::uint32_t sm_count = 0;
};

// The physical indexes a process sees, in ordinal order. `visible` and `order`: the variables'
// values, nullptr when unset.
std::vector<int> visible_devices(const std::vector<PhysicalDevice>& devices, const char* visible, const char* order);

}  // namespace simgpu
