// NVML shows the slice too: memory info (v1 and v2) reports the same numbers as cuMemGetInfo, and
// the running processes are the tenant's own. NVML devices are matched to the session's by UUID,
// never by index: NVML numbers every GPU of the machine, CUDA only the visible ones, in its own
// order (HAMi-core loses its cap when NVML initialises first).
//
// A process that uses NVML but never initialised CUDA (a monitor such as nvitop run with the
// tenant's variables) is not a member: it reads the tenant's cap and usage from the coordinator
// without joining, or, for a tenant that does not exist yet, applies its own SLICE_MEMORY_LIMIT.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "around.h"
#include "coordinator_view.h"
#include "hook_support.h"
#include "keep_errno.h"
#include "limits_text.h"
#include "lineage.h"
#include "log.h"
#include "memory_report.h"
#include "nvml_api.h"
#include "nvml_use.h"

namespace slice::shim {
namespace {

constexpr nvmlReturn_t kNvmlFailedClosed = NVML_ERROR_INVALID_ARGUMENT;

std::string uuid_of(nvmlDevice_t device) {
  char uuid[96] = {};
  const auto get = SLICE_REAL(nvmlDeviceGetUUID);
  if (get == nullptr || get(device, uuid, static_cast<unsigned int>(sizeof uuid - 1)) != NVML_SUCCESS) return {};
  return uuid;
}

// The tenant's view of one GPU for a process that is not a member.
struct OutsideView {
  std::uint64_t cap = kNoLimit;
  std::uint64_t usage = 0;
  std::vector<std::int32_t> pids;
};

// The tenant of a process that is not a member: SLICE_TENANT, else the one its lineage is in (an
// nvidia-smi that a sliced server runs: libslice/coordinator/lineage.h), looked up once; empty when
// neither names one.
const std::string& outside_tenant(const Config& config) {
  static std::atomic<const std::string*> known{nullptr};
  if (const std::string* t = known.load(std::memory_order_acquire)) return *t;
  auto* found =
      new std::string(config.tenant.empty() ? inherited_tenant(config.coordinator_dir).value_or("") : config.tenant);
  const std::string* expected = nullptr;
  if (known.compare_exchange_strong(expected, found)) return *found;
  delete found;
  return *expected;
}

OutsideView outside_view(const Config& config, const std::string& uuid, std::uint64_t device_total) {
  OutsideView v;
  v.cap = cap_on(config.memory_limit.for_gpu(uuid), device_total);
  const std::string& tenant = outside_tenant(config);
  if (tenant.empty()) return v;
  std::string error;
  for (const TenantView& t : read_coordinator(config.coordinator_dir, config.policy_dir, error)) {
    if (t.name != tenant || !t.readable) continue;
    for (std::size_t g = 0; g < t.gpus.size(); ++g) {
      if (t.gpus[g].uuid != uuid) continue;
      v.cap = t.gpus[g].cap_bytes;
      v.usage = t.gpus[g].used_bytes;
    }
    for (const ProcessView& p : t.processes) v.pids.push_back(p.pid);
  }
  return v;
}

// Which slice applies to an NVML device. false: report the device's own figures.
bool slice_for(nvmlDevice_t device, std::uint64_t total, std::uint64_t free, SliceMemory& out) {
  const KeepErrno keep;  // the coordinator's files are read for a process that is not a member
  const std::string uuid = uuid_of(device);
  if (uuid.empty()) return false;
  if (Session* s = current_session()) {
    const int index = s->index_of_uuid(uuid);
    if (index < 0) return false;  // a GPU this process cannot use: not part of its slice
    out = slice_of(*s, index, total, free, SliceLook::figures_only);  // never a look from inside NVML
    return out.capped;
  }
  const Config* config = session_config();
  if (config == nullptr || config->disable) return false;
  const OutsideView v = outside_view(*config, uuid, total);
  out = clamp_to_cap(total, free, v.cap, v.usage);
  return out.capped;
}

std::vector<std::int32_t> tenant_pids() {
  const KeepErrno keep;
  if (Session* s = current_session()) return s->coordinator->live_pids();
  const Config* config = session_config();
  if (config == nullptr || outside_tenant(*config).empty()) return {};
  return outside_view(*config, "", 0).pids;
}

bool tenant_known() {
  if (current_session() != nullptr) return true;
  const Config* config = session_config();
  return config != nullptr && !config->disable && !outside_tenant(*config).empty();
}

// The application's init: counted apart from libslice's own reference (nvml_use.h).
nvmlReturn_t nvml_init(NvmlInit which, unsigned int flags) {
  if (session_config() == nullptr) {
    start_session();  // writes the one error line and fails closed, without touching the driver
    return kNvmlFailedClosed;
  }
  return application_nvml_init(which, flags);
}

// The driver's list, of any process-info layout, filtered to the tenant's processes.
template <typename Info, typename Call>
nvmlReturn_t tenant_processes(unsigned int* count, Info* infos, Call&& call) {
  if (session_state() == SessionState::failed) return kNvmlFailedClosed;
  if (nvml_closed_to_program()) return NVML_ERROR_UNINITIALIZED;  // NVML is started only for libslice
  if (disabled() || count == nullptr || !tenant_known()) return call(count, infos);
  std::vector<Info> all(64);
  nvmlReturn_t rc;
  for (;;) {
    unsigned int n = static_cast<unsigned int>(all.size());
    rc = call(&n, all.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE && n > all.size()) {
      all.resize(n + 16);
      continue;
    }
    if (rc != NVML_SUCCESS) return rc;
    all.resize(n);
    break;
  }
  const std::vector<std::int32_t> pids = tenant_pids();
  std::erase_if(all, [&](const Info& info) {
    return std::find(pids.begin(), pids.end(), static_cast<std::int32_t>(info.pid)) == pids.end();
  });
  const unsigned int room = *count;
  *count = static_cast<unsigned int>(all.size());
  if (all.size() > room || (infos == nullptr && !all.empty())) return NVML_ERROR_INSUFFICIENT_SIZE;
  if (!all.empty()) std::copy(all.begin(), all.end(), infos);
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace slice::shim

using namespace slice::shim;

SLICE_HOOK_BODY(nvmlReturn_t, nvmlInit_v2)(void) { return nvml_init(NvmlInit::v2, 0); }
SLICE_HOOK_BODY(nvmlReturn_t, nvmlInit)(void) { return nvml_init(NvmlInit::v1, 0); }
SLICE_HOOK_BODY(nvmlReturn_t, nvmlInitWithFlags)(unsigned int flags) { return nvml_init(NvmlInit::with_flags, flags); }

// Counted against the application's inits, so that its last one ends NVML (nvml_use.h).
SLICE_HOOK_BODY(nvmlReturn_t, nvmlShutdown)(void) { return application_nvml_shutdown(); }

namespace {

// Both memory-info layouts: the driver answers, then total and free become the slice's and used
// what is left of it. v2's reserve (the driver's own) is outside any slice.
template <typename Memory, typename Fn>
nvmlReturn_t slice_memory_info(Fn real, nvmlDevice_t device, Memory* memory) {
  if (real == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (session_state() == SessionState::failed) return kNvmlFailedClosed;
  if (nvml_closed_to_program()) return NVML_ERROR_UNINITIALIZED;  // NVML is started only for libslice
  const nvmlReturn_t rc = call_real(real, device, memory);
  SliceMemory m;
  if (rc != NVML_SUCCESS || memory == nullptr || disabled() || !slice_for(device, memory->total, memory->free, m))
    return rc;
  memory->total = m.total;
  memory->free = m.free;
  if constexpr (requires { memory->reserved; }) memory->reserved = 0;
  memory->used = m.total - m.free;
  return rc;
}

}  // namespace

// The overloads the generated wrappers call (around.h), one per layout.
nvmlReturn_t slice::shim::memory_info(nvmlDevice_t device, nvmlMemory_t* memory,
                                      decltype(&::nvmlDeviceGetMemoryInfo) real) {
  return slice_memory_info(real, device, memory);
}

nvmlReturn_t slice::shim::memory_info(nvmlDevice_t device, nvmlMemory_v2_t* memory,
                                      decltype(&::nvmlDeviceGetMemoryInfo_v2) real) {
  return slice_memory_info(real, device, memory);
}

nvmlReturn_t slice::shim::running_processes(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos,
                                            decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) real) {
  if (real == nullptr) return NVML_ERROR_UNINITIALIZED;
  return tenant_processes(count, infos,
                          [&](unsigned int* n, nvmlProcessInfo_t* out) { return call_real(real, device, n, out); });
}

nvmlReturn_t slice::shim::running_processes(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos,
                                            decltype(&::nvmlDeviceGetComputeRunningProcesses) real) {
  if (real == nullptr) return NVML_ERROR_UNINITIALIZED;
  return tenant_processes(count, infos,
                          [&](unsigned int* n, nvmlProcessInfo_v1_t* out) { return call_real(real, device, n, out); });
}
