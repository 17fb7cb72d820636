// errno at every age of the process, for every hooked export (issue 25). Generated from the hook
// list (shim/hooked_functions.inc): a new hook is covered by construction. The program starts the
// driver, makes a context, allocates, is refused past the cap (under libslice), waits until libslice
// re-reads its policies on its own schedule (more than a second), and then calls every hooked export
// twice, looked up by name in the driver (and NVML) as the CUDA runtime and Python do, with every
// argument zero: once with the driver's own errno untouched and once after a call that succeeded.
// Before each call errno is set to a value of the program's; the value after is printed.
//
//   errno_every_hook       NAME<TAB>ERRNO-AFTER lines; errno_test.sh compares them with and
//                          without libslice (the driver's answers may differ: the cap; errno may not)
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "slice/nvml_subset.h"

namespace {

// A call with every argument zero (null pointers, zero handles and sizes, zeroed structures).
template <typename R, typename... A>
int call_zero(void* fn) {
  return static_cast<int>(reinterpret_cast<R (*)(A...)>(fn)(A{}...));
}
template <typename R, typename... A>
int (*zero_caller(R (*)(A...)))(void*) {
  return &call_zero<R, A...>;
}

struct Hooked {
  const char* name;
  bool nvml;
  int (*call)(void*);
};

const std::vector<Hooked> kHooked = {
#define SLICE_HOOK_CU(name, ret, params, args) {#name, false, zero_caller(static_cast<ret(*) params>(nullptr))},
#define SLICE_HOOK_NVML(name, ret, params, args) {#name, true, zero_caller(static_cast<ret(*) params>(nullptr))},
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_NVML
};

constexpr int kProgramsErrno = 4242;

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr || nvml == nullptr) return std::fprintf(stderr, "errno_every_hook: no driver\n"), 2;
  const auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(cuda, "cuInit"));
  const auto get = reinterpret_cast<CUresult (*)(CUdevice*, int)>(dlsym(cuda, "cuDeviceGet"));
  const auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(dlsym(cuda, "cuDevicePrimaryCtxRetain"));
  const auto set = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(cuda, "cuCtxSetCurrent"));
  const auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, std::size_t)>(dlsym(cuda, "cuMemAlloc_v2"));
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUdeviceptr small = 0, large = 0;
  if (init(0) != CUDA_SUCCESS || get(&dev, 0) != CUDA_SUCCESS || retain(&ctx, dev) != CUDA_SUCCESS ||
      set(ctx) != CUDA_SUCCESS || alloc(&small, 1 << 20) != CUDA_SUCCESS)
    return std::fprintf(stderr, "errno_every_hook: the driver did not start\n"), 2;
  alloc(&large, std::size_t{8} << 30);  // refused under the test's cap
  usleep(1'100'000);                    // libslice re-reads its policies once a second
  unsigned covered = 0;
  for (int round = 0; round < 2; ++round) {
    for (const Hooked& h : kHooked) {
      void* fn = dlsym(h.nvml ? nvml : cuda, h.name);
      if (fn == nullptr) continue;  // an export this driver lacks
      set(ctx);
      if (round == 1) alloc(&small, 4096);  // a call that succeeded just before
      errno = kProgramsErrno;
      h.call(fn);
      const int after = errno;
      std::printf("%s\tround %d\t%d\n", h.name, round, after);
      covered += round == 0;
    }
  }
  std::fprintf(stderr, "errno_every_hook: %u of %zu hooked exports called\n", covered, kHooked.size());
  return 0;
}
