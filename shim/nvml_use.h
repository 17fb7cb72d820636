// libslice's use of NVML, for what it measures for itself (a context's memory, the reconciliation of
// what the driver holds for this process), through the one NVML the process has: the application's
// namespace, the same handle SLICE_REAL uses. Never a copy in a link-map namespace of its own
// (dlmopen): that brings a second C library into the process, whose pthread keys alias the
// application's and the driver's per-thread slots; on the real driver every Python program then
// crashed at its first context (issue 22).
//
// NVML counts nvmlInit and nvmlShutdown, and the application must see NVML as it would without
// libslice: a call before its first nvmlInit or after its last nvmlShutdown fails with
// NVML_ERROR_UNINITIALIZED, and an extra nvmlShutdown of its own cannot take a reference of
// libslice's. So libslice never keeps a reference beyond a look:
// - each look (NvmlLook) takes a reference of its own with nvmlInit_v2 and gives it back with
//   nvmlShutdown: about 4 us where NVML is started already (the application holds it), else a start
//   and an end (about 11 ms the first time in a process, about 5 ms once a context exists, on the
//   H200); a context's creation is measured so, and where the last start took more than a
//   millisecond and the application holds none, reconciliation looks ten times less often
//   (nvml_looks_costly);
// - the application's inits and shutdowns pass through here (nvml_hooks.cpp) and are counted; one
//   of its shutdowns beyond its inits is answered NVML_ERROR_UNINITIALIZED without reaching NVML
//   (NVML's answer for a count of zero; passed on, it could take a look's reference);
// - no lock is held across a call into NVML: NVML's entry points may call one another through the
//   dynamic linker, that is through libslice's hooks (the simulated NVML's do; tests/gpu/run.sh's
//   nvml-reentry tells for the real one). Such a call, made from inside a call that libslice's hooks
//   or looks made (InsideNvml), passes straight through, uncounted and unchanged. (A lock held
//   across nvmlInit_v2 hung every process at its first context on the H200, 2026-12-04.)
// What remains visible: while a look holds NVML started (a context's creation, a reconciliation),
// NVML answers another thread of the application that calls it without nvmlInit; and NVML's
// first start leaves its own thread, descriptors (close-on-exec) and one pthread key in a process
// that never used NVML itself, as the driver's own start does.
// Not covered: a call NVML makes from a thread of its own into a hooked entry point is not marked
// (the mark is per thread) and is taken as the application's (tests/gpu/run.sh's nvml-reentry
// reports whether the real NVML makes any: other_threads).
// libslice's NVML calls are made from the thread that needs the figure: the application's at a
// context's creation or a refusal, libslice's compute watcher for the periodic reconciliation. With
// one C library NVML's per-thread state is its own on each, as in any program that uses NVML.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nvml_api.h"

namespace slice::shim {

// NVML started for libslice's looks from construction to destruction: through the application's
// reference where it holds one, else through one of libslice's own, taken here and given back at
// destruction.
class NvmlLook {
 public:
  NvmlLook();
  ~NvmlLook();
  NvmlLook(const NvmlLook&) = delete;
  NvmlLook& operator=(const NvmlLook&) = delete;

  // This process's device memory on the GPU with this UUID ("GPU-..."), as NVML reports it (its
  // entry in the running compute processes, 0 when not listed); nullopt where NVML cannot tell: no
  // NVML, NVML does not start, or this process not to be found by its PID (a PID namespace NVML does
  // not see).
  std::optional<std::uint64_t> process_memory(const std::string& uuid);

 private:
  bool own_ref_ = false;  // this look took a reference of libslice's
};

// True when a look now costs an NVML start and end (the application holds no reference) and the
// last start took more than a millisecond.
bool nvml_looks_costly() noexcept;

// Marks the calling thread as inside a call into NVML that libslice made (a hook's or a look's):
// NVML's calls of its own entry points, which reach libslice's hooks, pass straight through.
class InsideNvml {
 public:
  InsideNvml() noexcept;
  ~InsideNvml();
  InsideNvml(const InsideNvml&) = delete;
  InsideNvml& operator=(const InsideNvml&) = delete;
};
bool inside_nvml() noexcept;
template <typename Fn, typename... Args>
auto nvml_call(Fn fn, Args... args) {
  const InsideNvml inside;
  return fn(args...);
}

// The application's nvmlInit, nvmlInit_v2 or nvmlInitWithFlags(flags), and its nvmlShutdown, made
// and counted as above. NVML_ERROR_LIBRARY_NOT_FOUND where NVML is not installed.
enum class NvmlInit { v1, v2, with_flags };
nvmlReturn_t application_nvml_init(NvmlInit which, unsigned int flags) noexcept;
nvmlReturn_t application_nvml_shutdown() noexcept;

}  // namespace slice::shim
