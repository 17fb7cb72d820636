// How a program traced by syscount (tests/gpu/syscount.cpp) marks where one phase of its work ends
// and the next begins: close() of a negative descriptor that encodes the phase's number. The kernel
// answers it with EBADF and does nothing else, no library makes such a call, and the tracer sees it
// at the system call's entry without reading the program's memory. The call is made with syscall(),
// so that no wrapper (libslice's included) can stand between the program and the kernel.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

namespace phase_marker {

// The descriptor for phase P is -(kBase + P), P in [0, kMaxPhase].
constexpr long kBase = 0x5ca1e000;
constexpr long kMaxPhase = 255;

inline void mark(int phase) { syscall(SYS_close, -(kBase + phase)); }

// The phase a close() argument marks, or -1 when it is an ordinary close(). Only the low 32 bits
// are the descriptor (the kernel reads an int).
inline int phase_of(unsigned long close_argument) {
  const long fd = static_cast<int>(static_cast<unsigned>(close_argument));
  return fd <= -kBase && fd >= -(kBase + kMaxPhase) ? static_cast<int>(-fd - kBase) : -1;
}

}  // namespace phase_marker
