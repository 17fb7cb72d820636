// errno as libslice found it. libslice's own work around a driver call (joining the coordinator,
// looking through NVML, reconciling, logging a refusal, waiting at the compute gate) makes system
// calls that may set errno; the program must see errno as the driver left it, as it would without
// libslice (tests/shim/process_trace_test.py compares). Only on the paths that make system calls:
// a launch that passes an open gate makes none.
#pragma once

#include <cerrno>

namespace slice::shim {

class KeepErrno {
 public:
  KeepErrno() noexcept : saved_(errno) {}
  ~KeepErrno() { errno = saved_; }
  KeepErrno(const KeepErrno&) = delete;
  KeepErrno& operator=(const KeepErrno&) = delete;

 private:
  int saved_;
};

}  // namespace slice::shim
