// A stand-in libcuda.so.1 from the future, for shim_procaddr_future: its cuGetProcAddress answers
// "cuMemAlloc" at CUDA 14.0 and later with a new ABI (cuMemAlloc_v3, unknown to libslice's table),
// and "cuMemFree" at 3.2 with the old 32-bit export where libslice's table says cuMemFree_v2 (the
// table and the driver disagree). Every other name is not found. No cuda.h: its declarations would
// clash with these stand-ins.
#include <cstring>

extern "C" {

__attribute__((visibility("default"))) int cuMemAlloc_v2(unsigned long long*, unsigned long) { return 0; }
__attribute__((visibility("default"))) int cuMemAlloc_v3(unsigned long long*, unsigned long, int) { return 0; }
__attribute__((visibility("default"))) int cuMemFree_v2(unsigned long long) { return 0; }
__attribute__((visibility("default"))) int cuMemFree(unsigned int) { return 0; }

__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                               unsigned long long, int* status) {
  *pfn = nullptr;
  if (std::strcmp(symbol, "cuMemAlloc") == 0)
    *pfn = version >= 14000 ? reinterpret_cast<void*>(&cuMemAlloc_v3) : reinterpret_cast<void*>(&cuMemAlloc_v2);
  else if (std::strcmp(symbol, "cuMemFree") == 0)
    *pfn = reinterpret_cast<void*>(&cuMemFree);
  if (status) *status = *pfn ? 0 : 1;
  return *pfn ? 0 : 500;  // CUDA_ERROR_NOT_FOUND
}

__attribute__((visibility("default"))) int cuGetProcAddress(const char* symbol, void** pfn, int version,
                                                            unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}

}  // extern "C"
