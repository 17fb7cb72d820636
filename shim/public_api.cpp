// The public list (include/slice/slice.h, libslice.map): what a program may ask libslice about its
// own slice. Versioned, unlike the hooks, which must bind to unversioned references to the driver's
// symbols. Never starts a session and never calls the driver: a program may ask at any time, from
// any thread, and is told when there is nothing to tell.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "hook_support.h"
#include "slice/slice.h"

// The layout programs compiled against version 1 of the header use.
static_assert(sizeof(slice_info) == 112 && offsetof(slice_info, memory_limit) == 72, "slice_info is an ABI");

extern "C" SLICE_EXPORT const char* slice_version(void) { return SLICE_VERSION_STRING; }

extern "C" SLICE_EXPORT int slice_get_info(int device, slice_info* info) {
  // Version 1's fields are all a caller may have room for; a larger struct (a later header) keeps
  // what lies past them.
  constexpr std::size_t kVersion1 = sizeof(slice_info);
  if (info == nullptr || info->size < kVersion1) return SLICE_ERROR_ARGUMENT;
  using namespace slice;
  shim::Session* s = shim::current_session();
  if (s == nullptr || !s->coordinator) return SLICE_ERROR_NOT_RUNNING;
  if (device < 0 || static_cast<std::size_t>(device) >= s->devices.size()) return SLICE_ERROR_DEVICE;
  const std::uint32_t size = info->size;
  std::memset(info, 0, kVersion1);
  info->size = size;
  const std::string& tenant = s->config.tenant;
  std::memcpy(info->tenant, tenant.data(), std::min(tenant.size(), sizeof info->tenant - 1));
  Coordinator& c = *s->coordinator;
  const std::uint64_t cap = c.cap(device);
  info->memory_limit = cap == kNoLimit ? SLICE_NO_LIMIT : cap;
  info->memory_used = c.usage(device);
  info->memory_mine = c.mine(device);
  const Coordinator::ComputeSettings compute = c.compute(device);
  info->compute_share = compute.share;
  info->compute_limit = compute.limit;
  info->priority = priority_rank(compute.priority);
  return SLICE_OK;
}
