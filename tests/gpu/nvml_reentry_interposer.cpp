// For tests/gpu/nvml_reentry.cpp: a library that stands where libslice stands, in front of NVML in
// the global scope, and notes every NVML entry point it is called through, with the nesting depth
// on its thread. A call at depth 1 was made by NVML itself, from inside another of its entry
// points, through the dynamic linker: libslice's hooks see such calls from inside their own (a
// lock held across nvmlInit_v2 would then be taken twice). Forwards each call to NVML's own.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <string>

namespace {

thread_local int t_depth = 0;
std::mutex g_mutex;
std::string g_nested;  // "inner<outer", comma-separated, each pair once
std::string g_other;   // entry points called from a thread other than the program's only one (NVML's own)
thread_local const char* t_outer = nullptr;

template <typename Fn, typename... Args>
int forward(const char* name, Args... args) {
  if (syscall(SYS_gettid) != getpid()) {
    const std::lock_guard<std::mutex> lock(g_mutex);
    if (g_other.find(name) == std::string::npos) g_other += (g_other.empty() ? "" : ",") + std::string(name);
  }
  if (t_depth > 0) {
    const std::string pair = std::string(name) + "<" + t_outer;
    const std::lock_guard<std::mutex> lock(g_mutex);  // never held across a call into NVML
    if (g_nested.find(pair) == std::string::npos) g_nested += (g_nested.empty() ? "" : ",") + pair;
  }
  // NVML's own definition, from its handle (loaded after this library, so RTLD_NEXT, which searches
  // from here, would not reach it when this library was dlopen'ed).
  static void* const nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
  const auto fn = nvml != nullptr ? reinterpret_cast<Fn>(dlsym(nvml, name)) : nullptr;
  if (fn == nullptr) return 999;  // NVML_ERROR_UNKNOWN
  const char* outer = t_outer;
  if (t_depth == 0) t_outer = name;
  ++t_depth;
  const int rc = fn(args...);
  --t_depth;
  t_outer = outer;
  return rc;
}

}  // namespace

#define NVML_REENTRY_WRAP(name, params, ...)                          \
  extern "C" __attribute__((visibility("default"))) int name params { \
    return forward<int(*) params>(#name, __VA_ARGS__);                \
  }
extern "C" __attribute__((visibility("default"))) int nvmlInit() { return forward<int (*)()>("nvmlInit"); }
extern "C" __attribute__((visibility("default"))) int nvmlInit_v2() { return forward<int (*)()>("nvmlInit_v2"); }
extern "C" __attribute__((visibility("default"))) int nvmlShutdown() { return forward<int (*)()>("nvmlShutdown"); }
NVML_REENTRY_WRAP(nvmlInitWithFlags, (unsigned int a), a)
NVML_REENTRY_WRAP(nvmlDeviceGetCount, (unsigned int* a), a)
NVML_REENTRY_WRAP(nvmlDeviceGetCount_v2, (unsigned int* a), a)
NVML_REENTRY_WRAP(nvmlDeviceGetHandleByIndex, (unsigned int a, void** b), a, b)
NVML_REENTRY_WRAP(nvmlDeviceGetHandleByIndex_v2, (unsigned int a, void** b), a, b)
NVML_REENTRY_WRAP(nvmlDeviceGetHandleByUUID, (const char* a, void** b), a, b)
NVML_REENTRY_WRAP(nvmlDeviceGetComputeRunningProcesses, (void* a, unsigned int* b, void* c), a, b, c)
NVML_REENTRY_WRAP(nvmlDeviceGetComputeRunningProcesses_v2, (void* a, unsigned int* b, void* c), a, b, c)
NVML_REENTRY_WRAP(nvmlDeviceGetComputeRunningProcesses_v3, (void* a, unsigned int* b, void* c), a, b, c)
NVML_REENTRY_WRAP(nvmlDeviceGetMemoryInfo, (void* a, void* b), a, b)
NVML_REENTRY_WRAP(nvmlDeviceGetMemoryInfo_v2, (void* a, void* b), a, b)

// What was seen: "inner<outer" pairs, or "" when NVML never called itself through the linker.
extern "C" __attribute__((visibility("default"))) const char* nvml_reentry_nested() {
  static std::string copy;
  const std::lock_guard<std::mutex> lock(g_mutex);
  copy = g_nested;
  return copy.c_str();
}

// Entry points called from another thread than the program's one (which makes no thread): NVML's
// or the driver's own threads, whose calls no per-thread mark of libslice's can recognise.
extern "C" __attribute__((visibility("default"))) const char* nvml_reentry_other_threads() {
  static std::string copy;
  const std::lock_guard<std::mutex> lock(g_mutex);
  copy = g_other;
  return copy.c_str();
}
