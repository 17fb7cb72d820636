#include "nvml_start.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "nvml_subset.h"

namespace simgpu {
namespace {

// One start's state. Made with new and never destroyed while its thread may run; a process that
// exits with NVML started leaves it as it is.
struct Start {
  pthread_key_t key{};
  bool key_made = false;
  int fd = -1;
  std::atomic<bool> stop{false};
  std::thread thread;
};

std::recursive_mutex* g_lock = nullptr;  // NVML's lock (nvml.cpp), known from the first start
Start* g_start = nullptr;                // the current start, under the lock
std::atomic<pid_t> g_own_thread_tid{0};  // NVML's own thread, as the kernel names it

bool leak_per_start() {
  const char* v = std::getenv("SIMGPU_NVML_LEAK");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

template <typename Fn>
Fn through_the_linker(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

// NVML's own thread: holding NVML's lock, it asks NVML about device 0 through the dynamic linker.
void own_thread(Start* start) {
  pthread_setname_np(pthread_self(), "simgpu-nvml");
  g_own_thread_tid.store(gettid());
  const auto by_index = through_the_linker<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2");
  const auto memory =
      through_the_linker<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*)>("nvmlDeviceGetMemoryInfo_v2");
  const auto processes = through_the_linker<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*)>(
      "nvmlDeviceGetComputeRunningProcesses_v3");
  while (!start->stop.load()) {
    usleep(5000);
    std::lock_guard<std::recursive_mutex> hold(*g_lock);
    nvmlDevice_t device = nullptr;
    if (!start->stop.load() && by_index != nullptr && by_index(0, &device) == NVML_SUCCESS) {
      nvmlMemory_v2_t m{};
      m.version = nvmlMemory_v2;
      if (memory != nullptr) memory(device, &m);
      nvmlProcessInfo_t infos[8];
      unsigned n = 8;
      if (processes != nullptr) processes(device, &n, infos);
    }
  }
}

// A forked child has no thread of NVML's: a hold of the lock by it is forgotten with it (the lock's
// owner, as glibc records it; a hold by any other thread stays, as NVML cannot know of it).
void forget_after_fork() {
  const pid_t own = g_own_thread_tid.exchange(0);
  if (g_lock != nullptr && own != 0 && g_lock->native_handle()->__data.__owner == own)
    new (g_lock) std::recursive_mutex();
  if (g_start != nullptr) {
    new (&g_start->thread) std::thread();  // not joinable: that thread is not in this process
    g_start->stop.store(true);
  }
}

}  // namespace

void nvml_started_locked(std::recursive_mutex& lock) {
  static std::once_flag fork_handler;
  std::call_once(fork_handler, [] { pthread_atfork(nullptr, nullptr, forget_after_fork); });
  g_lock = &lock;
  auto* start = new Start();
  start->key_made = pthread_key_create(&start->key, nullptr) == 0;
  start->fd = memfd_create("simgpu-nvml-start", MFD_CLOEXEC);
  start->thread = std::thread(own_thread, start);
  g_start = start;
}

void* nvml_stopping_locked() {
  Start* start = g_start;
  g_start = nullptr;
  if (start != nullptr) start->stop.store(true);
  return start;
}

void nvml_join_stopped(void* stopped) {
  auto* start = static_cast<Start*>(stopped);
  if (start == nullptr) return;
  if (start->thread.joinable()) start->thread.join();
  if (!leak_per_start()) {
    if (start->key_made) pthread_key_delete(start->key);
    if (start->fd >= 0) close(start->fd);
  }
  delete start;
}

}  // namespace simgpu
