// What the simulated NVML knows of each thread, kept as a user-mode library keeps it: in two
// pthread keys made when the library is loaded, read back and checked by every call
// (thread_keys.h says why).
#pragma once

namespace simgpu {

// Every exported NVML function calls this first: reads back both keys (a key that another library
// overwrote is reported as a breach by `function`) and counts the call in this thread's record.
void nvml_thread_call(const char* function);
// A query about device `index` (a physical index): this thread's record of the device it last asked about.
void nvml_thread_device(const char* function, int index);

}  // namespace simgpu
