#include "nvml_use.h"

#include <unistd.h>

#include <atomic>
#include <tuple>
#include <vector>

#include "fork_guard.h"
#include "futex.h"
#include "hook_support.h"
#include "keep_errno.h"
#include "log.h"
#include "nvml_gate.h"
#include "shim.h"
#include "tenant_file.h"  // monotonic_ns

namespace slice::shim {
namespace {

// libslice's reference: not taken yet, being taken (by one thread), held, or NVML would not start.
enum : std::uint32_t { kNotStarted, kStarting, kStarted, kUnavailable };
constinit std::atomic<std::uint32_t> g_own{kNotStarted};  // a futex: threads wait for a start
constinit std::atomic<std::uint64_t> g_start_ns{0};
// How long a look waits for another thread's start of NVML (about 11 ms on the H200).
constexpr std::uint64_t kStartWaitNs = 5'000'000'000;

// Starts NVML for libslice once; true while libslice holds its reference.
bool own_reference() {
  std::uint32_t state = g_own.load(std::memory_order_acquire);
  if (state == kStarted) return true;
  if (state == kUnavailable) return false;
  const auto init = SLICE_REAL(nvmlInit_v2);
  if (init == nullptr) return false;
  if (state == kNotStarted && g_own.compare_exchange_strong(state, kStarting)) {
    const OwnWork own;  // a fork waits for it: a child must not inherit NVML half started
    const std::uint64_t start = monotonic_ns();
    const nvmlReturn_t rc = init();
    g_start_ns.store(std::max<std::uint64_t>(monotonic_ns() - start, 1), std::memory_order_relaxed);
    if (rc == NVML_SUCCESS) nvml_view_own_reference();  // before the state says so (nvml_gate.h)
    g_own.store(rc == NVML_SUCCESS ? kStarted : kUnavailable, std::memory_order_release);
    futex_wake_all(&g_own, false);
    if (rc != NVML_SUCCESS)
      log::info("libslice could not start NVML (nvmlInit_v2: " + std::to_string(rc) +
                "): it measures no context memory and reconciles nothing with the driver");
    return rc == NVML_SUCCESS;
  }
  // Another thread starts it: its start takes milliseconds, and waits for nothing of ours.
  const std::uint64_t deadline = monotonic_ns() + kStartWaitNs;
  while ((state = g_own.load(std::memory_order_acquire)) == kStarting) {
    const std::uint64_t now = monotonic_ns();
    if (now >= deadline) return false;
    futex_wait(&g_own, kStarting, deadline - now, false);
  }
  return state == kStarted;
}

}  // namespace

NvmlLook::NvmlLook() {
  const KeepErrno keep;
  started_ = own_reference();
}

std::optional<std::vector<NvmlProcessEntry>> NvmlLook::processes(const std::string& uuid) {
  if (!started_) return std::nullopt;  // NVML did not start
  const KeepErrno keep;
  const OwnWork own;  // a fork waits for it
  const auto by_uuid = SLICE_REAL(nvmlDeviceGetHandleByUUID);
  const auto list = SLICE_REAL(nvmlDeviceGetComputeRunningProcesses_v3);
  nvmlDevice_t device = nullptr;
  if (by_uuid == nullptr || list == nullptr || by_uuid(uuid.c_str(), &device) != NVML_SUCCESS) return std::nullopt;
  std::vector<nvmlProcessInfo_t> infos(64);
  for (;;) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const nvmlReturn_t rc = list(device, &count, infos.data());
    if (rc == NVML_ERROR_INSUFFICIENT_SIZE && count > infos.size()) {
      infos.resize(count + 16);  // processes came meanwhile
      continue;
    }
    if (rc != NVML_SUCCESS) return std::nullopt;
    infos.resize(count);
    break;
  }
  std::vector<NvmlProcessEntry> entries;
  for (const nvmlProcessInfo_t& info : infos)
    entries.push_back({info.pid, info.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULL ? 0 : info.usedGpuMemory});
  return entries;
}

std::optional<std::uint64_t> NvmlLook::process_memory(const std::string& uuid) {
  const std::optional<std::vector<NvmlProcessEntry>> list = processes(uuid);
  return list ? own_entry(*list) : std::nullopt;
}

namespace {
constinit std::atomic<NvmlIdentity*> g_identity{nullptr};  // never destroyed: hooks run at exit
}  // namespace

NvmlIdentity& nvml_identity() noexcept {
  std::atomic<NvmlIdentity*>& identity = g_identity;
  if (NvmlIdentity* known = identity.load(std::memory_order_acquire)) return *known;
  auto* made = new NvmlIdentity();
  NvmlIdentity* expected = nullptr;
  if (identity.compare_exchange_strong(expected, made)) return *made;
  delete made;
  return *expected;
}

std::optional<std::uint64_t> own_entry(const std::vector<NvmlProcessEntry>& list) {
  const std::optional<std::uint32_t> self = nvml_identity().pid();
  if (!self) return std::nullopt;
  for (const NvmlProcessEntry& e : list)
    if (e.pid == *self) return e.bytes;
  return 0;  // not listed: nothing of this process on that device yet
}

std::uint64_t nvml_start_ns() noexcept { return g_start_ns.load(std::memory_order_relaxed); }

void nvml_after_fork_in_child() noexcept {
  // A start under way on a thread that is not in the child never ends here.
  if (g_own.load() == kStarting) g_own.store(kUnavailable);
  // The child is another process, under another PID (none made here: nothing allocates in it).
  if (NvmlIdentity* identity = g_identity.load()) identity->reset();
}

nvmlReturn_t application_nvml_init(NvmlInit which, unsigned int flags) noexcept {
  // The first call loads NVML, whose dlopen may set errno on its way: libslice's doing, not the
  // call's (the hook's frame gives the program its own errno back, and NVML's).
  const auto [v1, v2, with_flags] =
      std::tuple{SLICE_REAL(nvmlInit), SLICE_REAL(nvmlInit_v2), SLICE_REAL(nvmlInitWithFlags)};
  if ((which == NvmlInit::v1 && v1 == nullptr) || (which == NvmlInit::v2 && v2 == nullptr) ||
      (which == NvmlInit::with_flags && with_flags == nullptr))
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  const nvmlReturn_t rc = which == NvmlInit::v1   ? call_real(v1)
                          : which == NvmlInit::v2 ? call_real(v2)
                                                  : call_real(with_flags, flags);
  // Not counted with SLICE_DISABLE (libslice looks at nothing then).
  if (rc == NVML_SUCCESS && !disabled()) nvml_view_program_init();
  return rc;
}

nvmlReturn_t application_nvml_shutdown() noexcept {
  const auto shutdown = SLICE_REAL(nvmlShutdown);
  if (shutdown == nullptr) return NVML_ERROR_UNINITIALIZED;
  if (disabled()) return call_real(shutdown);
  // One shutdown more than its inits (every init of the application's was counted here): NVML's
  // answer to a count of zero, without asking it. Passed on, it would take libslice's reference.
  if (!nvml_view_program_shutdown()) return NVML_ERROR_UNINITIALIZED;
  const nvmlReturn_t rc = call_real(shutdown);
  if (rc != NVML_SUCCESS) nvml_view_program_init();  // NVML kept the reference: so does the count
  return rc;
}

bool nvml_closed_to_program() noexcept { return nvml_view_closed(); }

}  // namespace slice::shim
