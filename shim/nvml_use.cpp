#include "nvml_use.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <new>
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

struct NvmlState {
  // Orders libslice's looks against the application's inits and shutdowns. Re-made in a forked
  // child (another thread may have held it at the fork).
  std::mutex mu;
  int application_refs = 0;  // the application's successful inits less its shutdowns
  int own_refs = 0;          // references of libslice's looks, each given back when its look ends
  bool unavailable = false;  // libslice's own nvmlInit failed once: it does not try again
  // Read without the lock by nvml_looks_costly: the application's count, and how long libslice's
  // last start of NVML took.
  std::atomic<int> application_refs_seen{0};
  std::atomic<std::uint64_t> last_start_ns{0};
};

// Made on first use, never destroyed (a hook may measure while the process exits).
NvmlState& state() {
  static NvmlState* s = [] {
    pthread_atfork(nullptr, nullptr, [] { new (&state().mu) std::mutex(); });
    return new NvmlState();
  }();
  return *s;
}

}  // namespace

NvmlLook::NvmlLook() {
  const KeepErrno keep;
  NvmlState& n = state();
  std::lock_guard<std::mutex> lock(n.mu);
  if (n.application_refs > 0 || n.unavailable) return;
  const auto init = SLICE_REAL(nvmlInit_v2);
  if (init == nullptr || SLICE_REAL(nvmlShutdown) == nullptr) return;
  const std::uint64_t start = monotonic_ns();
  const nvmlReturn_t rc = init();
  n.last_start_ns.store(monotonic_ns() - start, std::memory_order_relaxed);
  if (rc != NVML_SUCCESS) {
    n.unavailable = true;
    log::info("libslice could not start NVML (nvmlInit_v2: " + std::to_string(rc) +
              "): it measures no context memory and reconciles nothing with the driver");
    return;
  }
  own_ref_ = true;
  ++n.own_refs;
}

NvmlLook::~NvmlLook() {
  if (!own_ref_) return;
  const KeepErrno keep;
  NvmlState& n = state();
  std::lock_guard<std::mutex> lock(n.mu);
  SLICE_REAL(nvmlShutdown)();
  --n.own_refs;
}

std::optional<std::uint64_t> NvmlLook::process_memory(const std::string& uuid) {
  const KeepErrno keep;
  NvmlState& n = state();
  std::lock_guard<std::mutex> lock(n.mu);                         // the application's nvmlShutdown waits for the look
  if (!own_ref_ && n.application_refs == 0) return std::nullopt;  // NVML is not started
  const auto by_uuid = SLICE_REAL(nvmlDeviceGetHandleByUUID);
  const auto processes = SLICE_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
  nvmlDevice_t device = nullptr;
  if (by_uuid == nullptr || processes == nullptr || by_uuid(uuid.c_str(), &device) != NVML_SUCCESS) return std::nullopt;
  std::vector<nvmlProcessInfo_t> infos(64);
  for (;;) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const nvmlReturn_t rc = processes(device, &count, infos.data());
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
  return n.application_refs_seen.load(std::memory_order_relaxed) == 0 &&
         n.last_start_ns.load(std::memory_order_relaxed) > kCostlyStartNs;
}

nvmlReturn_t application_nvml_init(NvmlInit which, unsigned int flags) noexcept {
  const auto v1 = SLICE_REAL(nvmlInit);
  const auto v2 = SLICE_REAL(nvmlInit_v2);
  const auto with_flags = SLICE_REAL(nvmlInitWithFlags);
  if ((which == NvmlInit::v1 && v1 == nullptr) || (which == NvmlInit::v2 && v2 == nullptr) ||
      (which == NvmlInit::with_flags && with_flags == nullptr))
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  const auto call = [&] { return which == NvmlInit::v1 ? v1() : which == NvmlInit::v2 ? v2() : with_flags(flags); };
  if (disabled()) return call();  // libslice looks at nothing: nothing to count
  NvmlState& n = state();
  std::lock_guard<std::mutex> lock(n.mu);  // a look never sees NVML half started
  const nvmlReturn_t rc = call();
  if (rc == NVML_SUCCESS) n.application_refs_seen.store(++n.application_refs, std::memory_order_relaxed);
  return rc;
}

nvmlReturn_t application_nvml_shutdown() noexcept {
  const auto shutdown = SLICE_REAL(nvmlShutdown);
  if (shutdown == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (disabled()) return shutdown();
  NvmlState& n = state();
  std::lock_guard<std::mutex> lock(n.mu);  // never under a look
  // One shutdown more than its inits: NVML answers that when its count is zero. Passed on while a
  // look holds a reference, it would take the look's.
  if (n.application_refs == 0 && n.own_refs > 0) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t rc = shutdown();
  if (n.application_refs > 0) n.application_refs_seen.store(--n.application_refs, std::memory_order_relaxed);
  return rc;
}

}  // namespace slice::shim
