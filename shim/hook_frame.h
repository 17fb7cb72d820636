// The frame every exported hook runs in (generated around each wrapper from hooked_functions.inc, so
// a new hook has one by construction). It makes two promises to the program:
//
// - errno as the driver left it. libslice's own work around the driver's call (joining the
//   coordinator, re-reading a policy, NVML, a refusal's log line, waits at the gate) makes system
//   calls that set errno, at any age of the process (a policy folder looked at once a second set
//   ENOENT after the first second: issue 25). The frame saves errno at entry, gives it back to the
//   program's own call of the driver (driver_call), keeps what the driver left, and sets that (or
//   the entry value, where the driver was not called) when the hook returns.
// - no re-entry. A hook reached while this thread is already inside one (the driver or NVML calling
//   their own exports through the dynamic linker, or a callback of theirs on the calling thread), or
//   on a thread of libslice's own (the compute watcher, whose every driver and NVML call is libslice's),
//   passes straight to the real function: uncounted, unaccounted, and without taking any lock of
//   libslice's that an outer call may hold. (A lock held across nvmlInit_v2 and taken again from
//   inside it hung every process on the H200, 2026-12-04.)
//
// Costs a few thread-local loads and stores and three reads or writes of errno per call; no system call.
#pragma once

#include <cerrno>

namespace slice::shim {

class HookFrame;

namespace detail {
// Initial-exec TLS (libslice.so is preloaded): one load each.
extern thread_local unsigned t_hook_depth;     // frames open on this thread, or 1 forever on libslice's own threads
extern thread_local HookFrame* t_outer_frame;  // the outermost frame, where the program's call is recorded
}  // namespace detail

class HookFrame {
 public:
  HookFrame() noexcept : nested_(detail::t_hook_depth++ != 0) {
    if (nested_) return;
    entry_errno_ = errno;
    detail::t_outer_frame = this;
  }
  ~HookFrame() {
    --detail::t_hook_depth;
    if (nested_) return;
    errno = driver_called_ ? driver_errno_ : entry_errno_;
    detail::t_outer_frame = nullptr;
  }
  HookFrame(const HookFrame&) = delete;
  HookFrame& operator=(const HookFrame&) = delete;

  // Inside another hook of this thread, or on a thread of libslice's own: pass straight through.
  bool nested() const noexcept { return nested_; }

  // The program's call of the driver (or NVML): made with the program's errno, and what the driver
  // leaves in errno is what the program will see.
  template <typename Fn, typename... Args>
  auto driver_call(Fn fn, Args... args) {
    errno = entry_errno_;
    auto rc = fn(args...);
    driver_errno_ = errno;
    driver_called_ = true;
    return rc;
  }

 private:
  bool nested_;
  bool driver_called_ = false;
  int entry_errno_ = 0;
  int driver_errno_ = 0;
};

// The frame of the program's call on this thread; nullptr outside hooks (libslice's own threads).
inline HookFrame* outer_frame() noexcept { return detail::t_outer_frame; }

// Marks the calling thread as libslice's own for its whole life (the compute watcher): every hook it
// reaches through the driver or NVML passes straight through.
inline void mark_libslice_thread() noexcept { detail::t_hook_depth = 1; }

// Whether this thread is inside a hook now (or is libslice's own).
inline bool inside_hook() noexcept { return detail::t_hook_depth != 0; }

}  // namespace slice::shim
