// libslice's crash report. A fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE) whose faulting instruction is
// in libslice.so's own code writes an `error` line naming libslice's version, the process and the
// signal, and a backtrace (libunwind, loaded by dlopen: libslice.so needs nothing new at run
// time), all through log::SignalSafeLine; then the handler that was there before us takes
// the same fault as if libslice had never been installed. Any other fault (the application's, a
// JVM's deliberate ones) goes straight to the previous handler, with no output.
//
// SIGABRT is not handled: abort() raises it from libc, so the faulting PC cannot say whether
// libslice was at fault, and the application's own abort() is none of libslice's business.
#pragma once

namespace slice::shim {

// Installs the handlers once per process (a later call does nothing), chaining to whatever was
// installed before. Called when a session starts with SLICE_CRASH_HANDLER on, never at load.
// The thread's alternate signal stack is used where the application set one; none is made.
void install_crash_handlers() noexcept;

// Loads libunwind for the report's backtrace (and runs it once, so that its lazy set-up is done
// outside any signal handler). Loading it costs about half a millisecond, so it is kept off the
// start-up path: the compute watcher thread calls this when it starts, at a process's first launch.
// Until then, and in a process that never launches, a report shows the faulting frame only.
// Nothing when the handlers are not installed.
void load_crash_unwinder() noexcept;

}  // namespace slice::shim
