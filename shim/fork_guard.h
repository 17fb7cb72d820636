// fork() at any instant (issue 25). Programs fork beside busy CUDA threads all day (PyTorch's
// DataLoader workers, multiprocessing, subprocess); a child that inherits a lock held by a thread of
// its parent, or NVML or the driver caught in the middle of a call, hangs at its first use of it.
// Without libslice that can only be the program's own doing; libslice must add no such case:
// - at a fork, no work of libslice's own is under way on another thread: its compute watcher's
//   rounds (stream and event queries, NVML reconciliations) and its NVML looks on the program's
//   threads (a context measured, a refusal reconciled) are OwnWork; the fork waits for those in
//   flight to end and holds new ones back until it is done. They are short (microseconds; the one
//   NVML start of a process, milliseconds), and the wait is bounded (kForkWaitNs): a fork never
//   waits long on libslice;
// - in the child, every lock and state of libslice's that another thread may have held is made anew
//   (the session is left behind and started again if the child uses CUDA: after_fork_in_child).
// No lock of libslice's is taken by the fork itself.
#pragma once

#include <cstdint>

namespace slice::shim {

// The longest a fork waits for libslice's own work in flight (the first NVML start of a process
// takes about 11 ms on the H200; the simulated GPU's slow start in the tests 200 ms).
inline constexpr std::uint64_t kForkWaitNs = 1'000'000'000;

// libslice's own work with the driver or NVML, from construction to destruction. Waits (bounded)
// while a fork is being prepared; nests on one thread.
class OwnWork {
 public:
  OwnWork() noexcept;
  ~OwnWork();
  OwnWork(const OwnWork&) = delete;
  OwnWork& operator=(const OwnWork&) = delete;
};

// Registers the fork handlers, once per process (before libslice's first lock or own work).
void install_fork_handlers() noexcept;

// What each part of libslice makes anew in a forked child (defined beside what it makes anew),
// called by the child handler in this order.
void real_driver_after_fork_in_child() noexcept;
void session_after_fork_in_child() noexcept;
void capture_after_fork_in_child() noexcept;
void nvml_after_fork_in_child() noexcept;
void graph_memory_after_fork_in_child() noexcept;
void procaddr_after_fork_in_child() noexcept;

}  // namespace slice::shim
