// What a start of the simulated NVML (its count leaving zero) makes, as the real one does, and what
// libslice must live beside (issue 25):
// - a pthread key, and a close-on-exec descriptor (a memfd named "simgpu-nvml-start"), given back
//   when the count returns to zero, unless SIMGPU_NVML_LEAK=1: then each start leaves both behind,
//   the worst a real NVML could do, so that a caller that starts NVML again and again runs out of keys;
// - a thread of its own ("simgpu-nvml"), stopped at the last shutdown, that every few milliseconds
//   takes NVML's lock and, holding it, calls NVML's exported entry points (memory info, the running
//   processes) through the dynamic linker, where a preloaded library's hooks receive them, on a
//   thread the library did not make. A forked child forgets that thread, and its hold on the lock
//   (NVML protects itself from its own thread, not from a caller's thread caught in a call).
#pragma once

#include <mutex>

namespace simgpu {

// Under NVML's lock, as the count leaves zero / comes back to it. nvml_stopping_locked hands back
// the thread to join once the lock is let go (it takes the lock itself).
void nvml_started_locked(std::recursive_mutex& lock);
void* nvml_stopping_locked();
void nvml_join_stopped(void* stopped);

}  // namespace simgpu
