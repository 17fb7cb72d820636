// libslice's use of NVML, for what it measures for itself (a context's memory, the reconciliation of
// what the driver holds for this process), through the one NVML the process has: the application's
// namespace, the same handle SLICE_REAL uses. Never a copy in a link-map namespace of its own
// (dlmopen): that brings a second C library into the process, whose pthread keys alias the
// application's and the driver's per-thread slots; on the real driver every Python program then
// crashed at its first context (issue 22).
//
// One start for the life of the process (issue 25). libslice starts NVML once, at its first look,
// and keeps that reference until the process ends. Each start of NVML costs milliseconds on a real
// GPU (11 ms the first, 2-5 ms after, on the H200) and may leave state behind (a thread, a key,
// descriptors): a start and an end per look, at every context, refusal, cuMemGetInfo and
// reconciliation, would pile up whatever NVML leaves per start (1024 pthread keys end a process)
// and would put the watcher inside nvmlInit for milliseconds at a time, where a fork() could catch
// it. So a look needs no start after the first, the watcher's looks are short queries, and what
// NVML keeps is what any program that uses NVML keeps.
//
// The program sees NVML as it would without libslice's reference (NVML counts nvmlInit and
// nvmlShutdown, and answers NVML_ERROR_UNINITIALIZED at a count of zero):
// - its inits and shutdowns pass through here (nvml_hooks.cpp) and are counted; a shutdown beyond its
//   inits is answered NVML_ERROR_UNINITIALIZED without reaching NVML (passed on, it would take
//   libslice's reference);
// - while it holds none and libslice holds its own, NVML is "closed" to it: the hooked NVML
//   functions answer NVML_ERROR_UNINITIALIZED, and so does every other NVML function it looked up
//   through dlsym (nvml_gate.cpp hands out a gate in front of each);
// - what is not covered: an NVML function the program bound at link time (-lnvidia-ml) that
//   libslice does not hook, called after its last nvmlShutdown in a process where libslice started
//   NVML, gets NVML's answer rather than NVML_ERROR_UNINITIALIZED.
//
// No lock is held across a call into NVML: NVML's entry points may call one another through the
// dynamic linker, that is through libslice's hooks, and those calls (in the hook's frame, or on a
// thread of libslice's own) pass straight through (hook_frame.h). A hook reached from a thread of
// NVML's own is taken as the program's, and no hook ever starts a look: NVML's hooks answer from
// the figures reconciled last (issue 25). The first start waits for nothing of libslice's; a thread
// that needs NVML while another starts it waits for that start (a few milliseconds, bounded).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nvml_api.h"
#include "nvml_identity.h"

namespace slice::shim {

// NVML started for libslice's looks: the first look starts it, once for the process.
class NvmlLook {
 public:
  NvmlLook();
  NvmlLook(const NvmlLook&) = delete;
  NvmlLook& operator=(const NvmlLook&) = delete;

  // The running compute processes on the GPU with this UUID ("GPU-..."), as NVML lists them (by the
  // host's PIDs); nullopt where NVML cannot tell (no NVML, NVML does not start).
  std::optional<std::vector<NvmlProcessEntry>> processes(const std::string& uuid);
  // This process's device memory there: its entry (0 when not listed); nullopt where NVML cannot
  // tell, or this process is not known in NVML's list yet (a PID namespace: nvml_identity.h).
  std::optional<std::uint64_t> process_memory(const std::string& uuid);

 private:
  bool started_ = false;
};

// Which of NVML's entries is this process (libslice/coordinator/nvml_identity.h); made on first use.
NvmlIdentity& nvml_identity() noexcept;
// This process's memory in one of NVML's lists: its entry's (0 when not listed); nullopt while the
// process is not known in NVML's lists.
std::optional<std::uint64_t> own_entry(const std::vector<NvmlProcessEntry>& list);

// The application's nvmlInit, nvmlInit_v2 or nvmlInitWithFlags(flags), and its nvmlShutdown, made
// and counted as above. NVML_ERROR_LIBRARY_NOT_FOUND where NVML is not installed.
enum class NvmlInit { v1, v2, with_flags };
nvmlReturn_t application_nvml_init(NvmlInit which, unsigned int flags) noexcept;
nvmlReturn_t application_nvml_shutdown() noexcept;

// Whether NVML is closed to the program now: libslice holds its reference and the program none.
bool nvml_closed_to_program() noexcept;

// How long libslice's start of NVML took (0 before it): what the docs and tests report.
std::uint64_t nvml_start_ns() noexcept;

}  // namespace slice::shim
