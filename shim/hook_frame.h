// The frame every exported hook runs in (generated around each wrapper from hooked_functions.inc, so
// a new hook has one by construction). It makes two promises to the program:
//
// - errno as the driver left it. libslice's own work around the driver's call (joining the
//   coordinator, re-reading a policy, NVML, a refusal's log line, waits at the gate) makes system
//   calls that set errno, at any age of the process (a policy folder looked at once a second set
//   ENOENT after the first second: issue 25). The frame saves errno at entry, gives it back to the
//   program's own call of the driver (frame_call), keeps what the driver left, and sets that (or
//   the entry value, where the driver was not called) when the hook returns.
// - no re-entry. A hook reached while this thread is already inside one (the driver or NVML calling
//   their own exports through the dynamic linker, or a callback of theirs on the calling thread), or
//   on a thread of libslice's own (the compute watcher, whose every driver and NVML call is libslice's),
//   passes straight to the real function: uncounted, unaccounted, and without taking any lock of
//   libslice's that an outer call may hold. (A lock held across nvmlInit_v2 and taken again from
//   inside it hung every process on the H200, 2026-12-04.)
//
// Costs a few loads and stores of one thread-local block, errno among them; no call, no system call.
#pragma once

#include <cerrno>

namespace slice::shim {

namespace detail {
// This thread's hook state, in one initial-exec TLS block (libslice.so is preloaded): a few loads.
struct HookThread {
  unsigned depth = 0;       // frames open on this thread, or 1 for good on libslice's own threads
  bool frame_open = false;  // an outermost frame is open: the program's call is recorded in it
  bool driver_called = false;
  int entry_errno = 0;
  int driver_errno = 0;
  int* errno_location = nullptr;  // this thread's errno, found once (no call per access)
};
extern thread_local HookThread t_hook;
inline int& thread_errno() noexcept {
  HookThread& t = t_hook;
  if (t.errno_location == nullptr) t.errno_location = &errno;
  return *t.errno_location;
}
}  // namespace detail

class HookFrame {
 public:
  HookFrame() noexcept : nested_(detail::t_hook.depth++ != 0) {
    if (nested_) return;
    detail::HookThread& t = detail::t_hook;
    t.entry_errno = detail::thread_errno();
    t.driver_called = false;
    t.frame_open = true;
  }
  ~HookFrame() {
    detail::HookThread& t = detail::t_hook;
    --t.depth;
    if (nested_) return;
    *t.errno_location = t.driver_called ? t.driver_errno : t.entry_errno;
    t.frame_open = false;
  }
  HookFrame(const HookFrame&) = delete;
  HookFrame& operator=(const HookFrame&) = delete;

  // Inside another hook of this thread, or on a thread of libslice's own: pass straight through.
  bool nested() const noexcept { return nested_; }

 private:
  bool nested_;
};

// The program's call of the driver (or NVML), in the outermost frame of this thread: made with the
// program's errno, and what the driver leaves in errno is what the program will see. Elsewhere (a
// thread of libslice's own), a plain call.
template <typename Fn, typename... Args>
[[gnu::always_inline]] inline auto frame_call(Fn fn, Args... args) {
  detail::HookThread& t = detail::t_hook;
  if (!t.frame_open) return fn(args...);
  *t.errno_location = t.entry_errno;
  auto rc = fn(args...);
  t.driver_errno = *t.errno_location;
  t.driver_called = true;
  return rc;
}

// Marks the calling thread as libslice's own for its whole life (the compute watcher): every hook it
// reaches through the driver or NVML passes straight through.
inline void mark_libslice_thread() noexcept { detail::t_hook.depth = 1; }

// Whether this thread is inside a hook now (or is libslice's own).
inline bool inside_hook() noexcept { return detail::t_hook.depth != 0; }

}  // namespace slice::shim
