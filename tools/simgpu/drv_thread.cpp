#include "drv_thread.h"

#include "thread_keys.h"

namespace simgpu {

namespace {
// Global objects: their constructors make the keys when the library is loaded, in this order.
const ThreadRecord<ContextStack> g_contexts("libcuda", "context stack");
const ThreadRecord<ThreadStreams> g_streams("libcuda", "per-thread default streams");
const ThreadRecord<ThreadCalls> g_calls("libcuda", "capture mode and host function");
}  // namespace

ContextStack& thread_contexts(const char* function) { return g_contexts.get(function); }
ThreadStreams& thread_streams(const char* function) { return g_streams.get(function); }
ThreadCalls& thread_calls(const char* function) { return g_calls.get(function); }

const ThreadCalls* check_thread_keys(const char* function) {
  g_contexts.find(function);
  g_streams.find(function);
  return g_calls.find(function);
}

}  // namespace simgpu
