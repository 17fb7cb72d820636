// A small driver-API + NVML client whose printed results must be the same with and without
// libslice preloaded (pass-through), and with SLICE_DISABLE=1. Built twice: linked against the
// simulated libcuda (PROBE_LINKED: link-time symbols) and, by default, reaching the driver the way
// the runtime does (dlopen + dlsym for cuGetProcAddress, everything else through cuGetProcAddress).
// Usage: shim_driver_probe[_linked] [expect-slice|expect-driver|any]
//   expect-slice: hooked functions must come from libslice, others from the driver, but for NVML
//   functions looked up by name, which come through libslice's gate (shim/nvml_gate.h);
//   expect-driver: every function from the driver.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "hook_names.h"
#include "slice/nvml_subset.h"

namespace {

std::string expectation = "any";
int origin_failures = 0;

void check_origin(const char* name, void* fn, bool nvml_by_name = false) {
  Dl_info info{};
  const bool from_slice = fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr &&
                          std::strstr(info.dli_fname, "libslice.so") != nullptr;
  const bool hooked = hooked_cuda_exports().contains(name) || hooked_nvml_exports().contains(name);
  const bool gated = nvml_by_name && std::strcmp(name, "nvmlErrorString") != 0;
  if ((expectation == "expect-slice" && from_slice != (hooked || gated)) ||
      (expectation == "expect-driver" && from_slice)) {
    std::fprintf(stderr, "%s: got %s's function, %s\n", name, from_slice ? "libslice" : "the driver",
                 expectation.c_str());
    ++origin_failures;
  }
}

}  // namespace

#ifdef PROBE_LINKED
extern "C" {
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t*);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t*);
}
#define RESOLVE_CU(var, name, version) \
  auto var = &::name;                  \
  check_origin(#name, reinterpret_cast<void*>(var))
#define RESOLVE_NVML(var, type, name) \
  auto var = &::name;                 \
  check_origin(#name, reinterpret_cast<void*>(var))
#else
#define RESOLVE_CU(var, name, version)                                 \
  decltype(&name) var = nullptr;                                       \
  get_proc(#var, reinterpret_cast<void**>(&var), version, 0, nullptr); \
  check_origin(#name, reinterpret_cast<void*>(var));                   \
  if (var == nullptr) {                                                \
    std::printf("cuGetProcAddress(%s) failed\n", #var);                \
    return 1;                                                          \
  }
#define RESOLVE_NVML(var, type, name)                                                \
  auto var = reinterpret_cast<type>(nvml != nullptr ? dlsym(nvml, #name) : nullptr); \
  check_origin(#name, reinterpret_cast<void*>(var), true);
#endif

int main(int argc, char** argv) {
  if (argc > 1) expectation = argv[1];
#ifndef PROBE_LINKED
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    std::printf("no driver\n");
    return 0;
  }
  auto get_proc = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(cuda, "cuGetProcAddress_v2"));
  check_origin("cuGetProcAddress_v2", reinterpret_cast<void*>(get_proc));
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
#endif
  RESOLVE_CU(cuInit, cuInit, 2000);
  RESOLVE_CU(cuDeviceGet, cuDeviceGet, 2000);
  RESOLVE_CU(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020);
  RESOLVE_CU(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000);
  RESOLVE_CU(cuCtxSetCurrent, cuCtxSetCurrent, 4000);
  RESOLVE_CU(cuCtxSynchronize, cuCtxSynchronize, 2000);
  RESOLVE_CU(cuMemGetInfo, cuMemGetInfo_v2, 3020);
  RESOLVE_CU(cuMemAlloc, cuMemAlloc_v2, 3020);
  RESOLVE_CU(cuMemAllocPitch, cuMemAllocPitch_v2, 3020);
  RESOLVE_CU(cuMemFree, cuMemFree_v2, 3020);
  RESOLVE_CU(cuMemAllocAsync, cuMemAllocAsync, 11020);
  RESOLVE_CU(cuMemFreeAsync, cuMemFreeAsync, 11020);

  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  size_t total = 0, free_before = 0, free_after = 0, total2 = 0, pitch = 0;
  CUdeviceptr a = 0, b = 0, c = 0;
  std::printf("cuInit %d\n", cuInit(0));
  std::printf("cuDeviceGet %d\n", cuDeviceGet(&dev, 0));
  std::printf("cuDeviceTotalMem %d %zu\n", cuDeviceTotalMem(&total, dev), total);
  std::printf("cuDevicePrimaryCtxRetain %d\n", cuDevicePrimaryCtxRetain(&ctx, dev));
  std::printf("cuCtxSetCurrent %d\n", cuCtxSetCurrent(ctx));
  std::printf("cuMemGetInfo %d total %zu\n", cuMemGetInfo(&free_before, &total2), total2);
  std::printf("cuMemAlloc %d\n", cuMemAlloc(&a, 64 << 20));
  std::printf("cuMemAllocPitch %d pitch %zu\n", cuMemAllocPitch(&b, &pitch, 1000, 100, 4), pitch);
  std::printf("cuMemAllocAsync %d\n", cuMemAllocAsync(&c, 1 << 20, nullptr));
  std::printf("cuCtxSynchronize %d\n", cuCtxSynchronize());
  cuMemGetInfo(&free_after, &total2);
  std::printf("free delta %zu\n", free_before - free_after);
  std::printf("cuMemFreeAsync %d\n", cuMemFreeAsync(c, nullptr));
  std::printf("cuCtxSynchronize %d\n", cuCtxSynchronize());
  std::printf("cuMemFree %d %d\n", cuMemFree(a), cuMemFree(b));
  std::printf("cuMemFree(bad) %d\n", cuMemFree(12345));

  RESOLVE_NVML(nvmlInit, nvmlReturn_t(*)(void), nvmlInit_v2);
  RESOLVE_NVML(nvmlGetHandle, nvmlReturn_t(*)(unsigned, nvmlDevice_t*), nvmlDeviceGetHandleByIndex_v2);
  RESOLVE_NVML(nvmlMemInfo, nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t*), nvmlDeviceGetMemoryInfo);
  if (nvmlInit != nullptr && nvmlGetHandle != nullptr && nvmlMemInfo != nullptr) {
    nvmlDevice_t nd = nullptr;
    nvmlMemory_t mem{};
    std::printf("nvmlInit_v2 %d\n", nvmlInit());
    std::printf("nvmlDeviceGetHandleByIndex_v2 %d\n", nvmlGetHandle(0, &nd));
    std::printf("nvmlDeviceGetMemoryInfo %d total %llu\n", nvmlMemInfo(nd, &mem), mem.total);
  } else {
    std::printf("no nvml\n");
  }
  return origin_failures == 0 ? 0 : 1;
}
