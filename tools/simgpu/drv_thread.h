// What the simulated driver knows of each thread, kept as the real libcuda keeps it: in pthread keys
// made when the library is loaded, read back and checked on every call (thread_keys.h says why).
// Three keys, as the real driver makes: the context stack; the per-thread default streams; and the
// thread's own call state (its stream capture mode, whether it runs a host function).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "driver.h"

namespace simgpu {

struct ContextStack {
  std::vector<Context*> contexts;  // the current context is the last one
};

// The per-thread default stream of each context, made on first use by this thread (drv_stream.cpp).
struct PerThreadStream {
  Stream* stream = nullptr;
  std::uint64_t id = 0;  // the stream's id when it was made, to recognise it
};
struct ThreadStreams {
  std::unordered_map<Context*, PerThreadStream> by_context;
};

struct ThreadCalls {
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;  // cuThreadExchangeStreamCaptureMode
  bool in_host_function = false;                                     // this thread runs an application's host function
};

// This thread's records, made on first use. `function`: the entry point, named in a report.
ContextStack& thread_contexts(const char* function = __builtin_FUNCTION());
ThreadStreams& thread_streams(const char* function = __builtin_FUNCTION());
ThreadCalls& thread_calls(const char* function = __builtin_FUNCTION());

// Reads back all three keys without making a record (every entry point does, in ensure_initialized):
// this thread's call state, or nullptr when it has none yet.
const ThreadCalls* check_thread_keys(const char* function);

}  // namespace simgpu
