// SIMGPU_LOAD_US: how long loading the library takes (its constructors run inside the dlopen that
// loads it). A real libcuda takes tens of milliseconds to load, NVML a few: long enough for another
// thread to fork, or to call into a library being loaded, while it happens. Built into both the
// driver and NVML, so each load takes as long.
#include <time.h>

#include <cerrno>
#include <cstdlib>

namespace simgpu {
namespace {

struct LoadTime {
  LoadTime() {
    const int saved = errno;  // a constructor must not change what the loading program sees
    const char* value = std::getenv("SIMGPU_LOAD_US");
    char* end = nullptr;
    const unsigned long us = value != nullptr ? std::strtoul(value, &end, 10) : 0;
    if (us > 0 && us <= 10'000'000 && end != nullptr && *end == '\0') {
      timespec ts{static_cast<time_t>(us / 1'000'000), static_cast<long>(us % 1'000'000) * 1000};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
      }
    }
    errno = saved;
  }
};
const LoadTime g_load_time;

}  // namespace
}  // namespace simgpu
