// A program shaped like the "dynamic loader" headers many CUDA programs carry (cuew, as in Blender's
// Cycles): it declares the driver's functions as pointer VARIABLES of the same names
// (`tcuInit *cuInit;`), exports them (-rdynamic), and fills them with dlsym on its own handle of
// libcuda.so.1. In such a process the global scope's first `cuInit` is the program's variable, so a
// preloaded library that hands out the address of "cuInit" as the global scope resolves it gives the
// program the address of its own variable, and the first call jumps into data (issue 25: exit 139).
// libslice must hand out its own functions whatever the program defines.
//
//   cuew_probe CAP_BYTES     exit 0: every look-up gave a function that works, the cap held
//
// It also checks dlerror() after look-ups that succeeded (a stale error from an earlier failed
// look-up must not survive them, as with glibc's own dlsym).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
// The driver's names, as variables of the program's (exported: the target links with -rdynamic).
using tcuInit = int(unsigned);
using tcuDeviceGet = int(int*, int);
using tcuDevicePrimaryCtxRetain = int(void**, int);
using tcuCtxSetCurrent = int(void*);
using tcuMemAlloc_v2 = int(unsigned long long*, std::size_t);
using tcuMemFree_v2 = int(unsigned long long);
using tcuMemGetInfo_v2 = int(std::size_t*, std::size_t*);
using tcuGetProcAddress_v2 = int(const char*, void**, int, unsigned long long, int*);
__attribute__((visibility("default"))) tcuInit* cuInit;
__attribute__((visibility("default"))) tcuDeviceGet* cuDeviceGet;
__attribute__((visibility("default"))) tcuDevicePrimaryCtxRetain* cuDevicePrimaryCtxRetain;
__attribute__((visibility("default"))) tcuCtxSetCurrent* cuCtxSetCurrent;
__attribute__((visibility("default"))) tcuMemAlloc_v2* cuMemAlloc_v2;
__attribute__((visibility("default"))) tcuMemFree_v2* cuMemFree_v2;
__attribute__((visibility("default"))) tcuMemGetInfo_v2* cuMemGetInfo_v2;
__attribute__((visibility("default"))) tcuGetProcAddress_v2* cuGetProcAddress_v2;
}

namespace {

int failures = 0;

void fail(const char* what) {
  std::fprintf(stderr, "cuew_probe: %s\n", what);
  ++failures;
}

// An address inside one of the program's own variables is data, never a function to call.
bool is_own_variable(void* p) {
  const void* vars[] = {&cuInit,        &cuDeviceGet,  &cuDevicePrimaryCtxRetain, &cuCtxSetCurrent,
                        &cuMemAlloc_v2, &cuMemFree_v2, &cuMemGetInfo_v2,          &cuGetProcAddress_v2};
  for (const void* v : vars)
    if (p == v) return true;
  return false;
}

template <typename T>
T* look_up(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    std::fprintf(stderr, "cuew_probe: dlsym(%s) found nothing: %s\n", name, dlerror());
    std::exit(2);
  }
  if (is_own_variable(p)) {
    std::fprintf(stderr, "cuew_probe: dlsym(%s) gave the address of the program's own variable\n", name);
    std::exit(1);
  }
  return reinterpret_cast<T*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  const unsigned long long cap = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 0;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::fprintf(stderr, "cuew_probe: no libcuda.so.1\n"), 2;
  cuInit = look_up<tcuInit>(lib, "cuInit");
  cuDeviceGet = look_up<tcuDeviceGet>(lib, "cuDeviceGet");
  cuDevicePrimaryCtxRetain = look_up<tcuDevicePrimaryCtxRetain>(lib, "cuDevicePrimaryCtxRetain");
  cuCtxSetCurrent = look_up<tcuCtxSetCurrent>(lib, "cuCtxSetCurrent");
  cuMemAlloc_v2 = look_up<tcuMemAlloc_v2>(lib, "cuMemAlloc_v2");
  cuMemFree_v2 = look_up<tcuMemFree_v2>(lib, "cuMemFree_v2");
  cuMemGetInfo_v2 = look_up<tcuMemGetInfo_v2>(lib, "cuMemGetInfo_v2");
  cuGetProcAddress_v2 = look_up<tcuGetProcAddress_v2>(lib, "cuGetProcAddress_v2");

  int dev = 0;
  void* ctx = nullptr;
  if (cuInit(0) != 0 || cuDeviceGet(&dev, 0) != 0 || cuDevicePrimaryCtxRetain(&ctx, dev) != 0 ||
      cuCtxSetCurrent(ctx) != 0)
    fail("the driver did not start");
  // cuGetProcAddress's answers must be functions too.
  void* fn = nullptr;
  int status = 0;
  if (cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, 0, &status) != 0 || fn == nullptr)
    fail("cuGetProcAddress_v2(cuMemAlloc) found nothing");
  else if (is_own_variable(fn))
    fail("cuGetProcAddress_v2(cuMemAlloc) gave the address of the program's own variable");
  unsigned long long p = 0;
  if (cuMemAlloc_v2(&p, 16 << 20) != 0) fail("a 16 MiB allocation failed");
  if (fn != nullptr && !is_own_variable(fn)) {
    unsigned long long q = 0;
    if (reinterpret_cast<tcuMemAlloc_v2*>(fn)(&q, 1 << 20) != 0) fail("an allocation through cuGetProcAddress failed");
    if (q != 0) cuMemFree_v2(q);
  }
  if (cap != 0) {
    unsigned long long big = 0;
    if (cuMemAlloc_v2(&big, cap) == 0) fail("an allocation of the whole cap beside 16 MiB was granted");
    std::size_t free_bytes = 0, total = 0;
    if (cuMemGetInfo_v2(&free_bytes, &total) != 0 || total != cap) fail("cuMemGetInfo does not report the cap");
  }
  if (p != 0) cuMemFree_v2(p);

  // dlerror() after a look-up that succeeded is NULL, whatever failed before it.
  const struct {
    void* handle;
    const char* name;
  } lookups[] = {
      {lib, "cuMemAlloc_v2"}, {RTLD_DEFAULT, "cuMemAlloc_v2"}, {RTLD_NEXT, "cuMemAlloc_v2"}, {RTLD_DEFAULT, "cuInit"}};
  for (const auto& l : lookups) {
    if (dlsym(lib, "cuNoSuchFunctionAnywhere") != nullptr) fail("a function that does not exist was found");
    void* found = dlsym(l.handle, l.name);
    const char* error = dlerror();
    if (found != nullptr && error != nullptr) {
      std::fprintf(stderr, "cuew_probe: dlerror() after dlsym(%s) succeeded: %s\n", l.name, error);
      ++failures;
    }
  }
  if (failures == 0) std::printf("cuew ok\n");
  return failures == 0 ? 0 : 1;
}
