#include "nvml_use.h"

#include <unistd.h>

#include <atomic>
#include <tuple>
#include <vector>

#include "keep_errno.h"
#include "log.h"
#include "shim.h"
#include "tenant_file.h"  // monotonic_ns

namespace slice::shim {
namespace {

// A start of NVML longer than this makes looks costly (about 11 ms, then 2 ms, on the H200; a few
// microseconds on the simulated GPU).
constexpr std::uint64_t kCostlyStartNs = 1'000'000;

// No lock: NVML's own count keeps it started while a look holds a reference, and NVML's entry
// points may call one another through the dynamic linker, that is through libslice's hooks, from
// inside a call libslice made (a lock held across it would never be let go).
struct NvmlState {
  std::atomic<int> application_refs{0};         // the application's successful inits less its shutdowns
  std::atomic<bool> unavailable{false};         // libslice's own nvmlInit failed once: it does not try again
  std::atomic<std::uint64_t> last_start_ns{0};  // how long libslice's last nvmlInit took
};

// Made on first use, never destroyed (a hook may measure while the process exits).
NvmlState& state() {
  static NvmlState* s = new NvmlState();
  return *s;
}

thread_local int t_inside_nvml = 0;

}  // namespace

InsideNvml::InsideNvml() noexcept { ++t_inside_nvml; }
InsideNvml::~InsideNvml() { --t_inside_nvml; }
bool inside_nvml() noexcept { return t_inside_nvml != 0; }

NvmlLook::NvmlLook() {
  const KeepErrno keep;
  NvmlState& n = state();
  const auto init = SLICE_REAL(nvmlInit_v2);
  if (n.unavailable.load(std::memory_order_relaxed) || init == nullptr || SLICE_REAL(nvmlShutdown) == nullptr) return;
  const std::uint64_t start = monotonic_ns();
  const nvmlReturn_t rc = nvml_call(init);
  n.last_start_ns.store(monotonic_ns() - start, std::memory_order_relaxed);
  if (rc != NVML_SUCCESS) {
    if (!n.unavailable.exchange(true))
      log::info("libslice could not start NVML (nvmlInit_v2: " + std::to_string(rc) +
                "): it measures no context memory and reconciles nothing with the driver");
    return;
  }
  own_ref_ = true;
}

NvmlLook::~NvmlLook() {
  if (!own_ref_) return;
  const KeepErrno keep;
  nvml_call(SLICE_REAL(nvmlShutdown));
}

std::optional<std::uint64_t> NvmlLook::process_memory(const std::string& uuid) {
  if (!own_ref_) return std::nullopt;  // NVML did not start
  const KeepErrno keep;
  const auto by_uuid = SLICE_REAL(nvmlDeviceGetHandleByUUID);
  const auto processes = SLICE_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
  nvmlDevice_t device = nullptr;
  if (by_uuid == nullptr || processes == nullptr || nvml_call(by_uuid, uuid.c_str(), &device) != NVML_SUCCESS)
    return std::nullopt;
  std::vector<nvmlProcessInfo_t> infos(64);
  for (;;) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const nvmlReturn_t rc = nvml_call(processes, device, &count, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE && count > infos.size()) {
      infos.resize(count + 16);  // processes came meanwhile
      continue;
    }
    if (rc != NVML_SUCCESS) return std::nullopt;
    infos.resize(count);
    break;
  }
  const unsigned int self = static_cast<unsigned int>(::getpid());
  for (const nvmlProcessInfo_t& info : infos)
    if (info.pid == self) return info.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULL ? 0 : info.usedGpuMemory;
  return 0;  // not listed: nothing of this process on that device yet
}

bool nvml_looks_costly() noexcept {
  const NvmlState& n = state();
  return n.application_refs.load(std::memory_order_relaxed) == 0 &&
         n.last_start_ns.load(std::memory_order_relaxed) > kCostlyStartNs;
}

nvmlReturn_t application_nvml_init(NvmlInit which, unsigned int flags) noexcept {
  // The first call loads NVML, whose dlopen may set errno on its way: libslice's doing, not the
  // call's. What NVML itself does to errno, the application sees as without libslice.
  const auto [v1, v2, with_flags] = [] {
    const KeepErrno keep;
    return std::tuple{SLICE_REAL(nvmlInit), SLICE_REAL(nvmlInit_v2), SLICE_REAL(nvmlInitWithFlags)};
  }();
  if ((which == NvmlInit::v1 && v1 == nullptr) || (which == NvmlInit::v2 && v2 == nullptr) ||
      (which == NvmlInit::with_flags && with_flags == nullptr))
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  // Not counted: a call NVML makes of itself from inside one already counted or of libslice's own,
  // or any with SLICE_DISABLE (libslice looks at nothing then).
  const bool counted = !inside_nvml() && !disabled();
  const nvmlReturn_t rc = nvml_call([&] {
    return which == NvmlInit::v1 ? v1() : which == NvmlInit::v2 ? v2() : with_flags(flags);
  });
  if (rc == NVML_SUCCESS && counted) state().application_refs.fetch_add(1);
  return rc;
}

nvmlReturn_t application_nvml_shutdown() noexcept {
  const auto shutdown = [] {
    const KeepErrno keep;  // as in application_nvml_init
    return SLICE_REAL(nvmlShutdown);
  }();
  if (shutdown == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (inside_nvml() || disabled()) return shutdown();
  NvmlState& n = state();
  int refs = n.application_refs.load();
  while (refs > 0 && !n.application_refs.compare_exchange_weak(refs, refs - 1)) {
  }
  // One shutdown more than its inits (every init of the application's was counted here): NVML's
  // answer to a count of zero, without asking it. Passed on, it would take the reference of a look
  // that another thread may be starting at this very moment.
  if (refs == 0) return NVML_ERROR_UNINITIALIZED;
  return nvml_call(shutdown);
}

}  // namespace slice::shim
