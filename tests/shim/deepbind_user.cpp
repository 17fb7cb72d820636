// A library linked against the (simulated) driver, as a framework's extension module is: what its
// reference to cuMemAlloc_v2 resolved to when it was loaded. Built -fPIC, so &cuMemAlloc_v2 is
// read from the GOT, filled by the dynamic linker in this library's lookup scope (with
// RTLD_DEEPBIND: libcuda before the preloaded libslice).
#define __CUDA_API_VERSION_INTERNAL 1  // declares the export by its real name
#include <cuda.h>

extern "C" __attribute__((visibility("default"))) void* deepbind_cuMemAlloc_v2_address() {
  return reinterpret_cast<void*>(&cuMemAlloc_v2);
}
