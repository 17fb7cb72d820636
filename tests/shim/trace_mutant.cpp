// A test of the process trace (process_trace_test.py): preloaded beside libslice, it does one thing
// libslice must never do to its host (PROCESS_TRACE_MUTANT names which), at the program's context
// step or late in its life. The comparison of the trace with and without libslice must catch each
// one; a kind it does not catch is a blind spot of the trace (issue 25).
//
//   descriptor           an inheritable descriptor
//   cloexec-descriptors  five close-on-exec descriptors
//   key                  a pthread key
//   thread               a thread of its own
//   libc                 a second C library (a namespace of its own)
//   signal               a signal disposition
//   late-errno           errno changed by cuMemGetInfo_v2 more than 2 s into the process
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::string kind() {
  const char* k = std::getenv("PROCESS_TRACE_MUTANT");
  return k != nullptr ? k : "";
}

double seconds_now() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
const double g_loaded_at = seconds_now();

void* idle(void*) {
  for (;;) pause();
  return nullptr;
}

void on_signal(int) {}

using MemGetInfo = int (*)(std::size_t*, std::size_t*);
MemGetInfo g_mem_get_info = nullptr;
int late_errno_mem_get_info(std::size_t* free_bytes, std::size_t* total) {
  const int rc = g_mem_get_info(free_bytes, total);
  if (seconds_now() - g_loaded_at > 2.0) errno = ENOENT;
  return rc;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void process_trace_mutant_step(const char* step) {
  if (std::strcmp(step, "context") != 0) return;
  const std::string k = kind();
  if (k == "descriptor") {
    (void)!open("/dev/null", O_RDONLY);
  } else if (k == "cloexec-descriptors") {
    for (int i = 0; i < 5; ++i) (void)!open("/dev/null", O_RDONLY | O_CLOEXEC);
  } else if (k == "key") {
    pthread_key_t key;
    pthread_key_create(&key, nullptr);
  } else if (k == "thread") {
    pthread_t t;
    if (pthread_create(&t, nullptr, idle, nullptr) == 0) pthread_detach(t);
  } else if (k == "libc") {
    (void)dlmopen(LM_ID_NEWLM, "libc.so.6", RTLD_NOW);
  } else if (k == "signal") {
    struct sigaction a {};
    a.sa_handler = on_signal;
    sigaction(SIGUSR2, &a, nullptr);
  }
}

extern "C" __attribute__((visibility("default"))) void* process_trace_mutant_wrap(const char* name, void* fn) {
  if (kind() == "late-errno" && fn != nullptr && std::strcmp(name, "cuMemGetInfo_v2") == 0) {
    g_mem_get_info = reinterpret_cast<MemGetInfo>(fn);
    return reinterpret_cast<void*>(&late_errno_mem_get_info);
  }
  return fn;
}
