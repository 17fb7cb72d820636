#include "nvml_thread.h"

#include <cstdint>

#include "thread_keys.h"

namespace simgpu {

namespace {
struct NvmlCalls {
  std::uint64_t count = 0;     // NVML calls this thread made
  const char* last = nullptr;  // and the last one
};
struct NvmlDevice {
  int index = -1;  // the device this thread last asked about
};
// Global objects: their constructors make the keys when the library is loaded, in this order.
const ThreadRecord<NvmlCalls> g_calls("libnvidia-ml", "calls");
const ThreadRecord<NvmlDevice> g_device("libnvidia-ml", "last device");
}  // namespace

void nvml_thread_call(const char* function) {
  NvmlCalls& calls = g_calls.get(function);
  ++calls.count;
  calls.last = function;
  g_device.find(function);
}

void nvml_thread_device(const char* function, int index) { g_device.get(function).index = index; }

}  // namespace simgpu
