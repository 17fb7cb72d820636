// The first check on a GPU machine: can a CUDA process start, see its GPUs, make a context and
// allocate? Run plainly and under LD_PRELOAD=libslice.so; what fails here makes every later check
// meaningless, so tests/gpu/run.sh stops short of them with this program's one-line reason.
// Driver API only, reached with dlopen: nothing to link. Prints key=value lines.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>

namespace {

template <typename Fn>
Fn sym(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

int fail(const char* why, int rc = -1) {
  std::printf("preflight=FAIL %s (CUresult %d)\n", why, rc);
  return 1;
}

}  // namespace

int main() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("preflight=FAIL no libcuda.so.1: %s\n", dlerror());
    return 1;
  }
  const auto init = sym<CUresult (*)(unsigned)>(lib, "cuInit");
  const auto version = sym<CUresult (*)(int*)>(lib, "cuDriverGetVersion");
  const auto count = sym<CUresult (*)(int*)>(lib, "cuDeviceGetCount");
  const auto get = sym<CUresult (*)(CUdevice*, int)>(lib, "cuDeviceGet");
  const auto name = sym<CUresult (*)(char*, int, CUdevice)>(lib, "cuDeviceGetName");
  const auto uuid = sym<CUresult (*)(CUuuid*, CUdevice)>(lib, "cuDeviceGetUuid_v2");
  const auto attr = sym<CUresult (*)(int*, CUdevice_attribute, CUdevice)>(lib, "cuDeviceGetAttribute");
  const auto retain = sym<CUresult (*)(CUcontext*, CUdevice)>(lib, "cuDevicePrimaryCtxRetain");
  const auto set = sym<CUresult (*)(CUcontext)>(lib, "cuCtxSetCurrent");
  const auto alloc = sym<CUresult (*)(CUdeviceptr*, size_t)>(lib, "cuMemAlloc_v2");
  const auto release = sym<CUresult (*)(CUdeviceptr)>(lib, "cuMemFree_v2");
  const auto info = sym<CUresult (*)(size_t*, size_t*)>(lib, "cuMemGetInfo_v2");
  if (!init || !count || !get || !retain || !set || !alloc || !release || !info) return fail("the driver lacks an export");
  if (const CUresult rc = init(0)) return fail("cuInit failed", rc);
  int v = 0, n = 0;
  version(&v);
  count(&n);
  std::printf("driver_version=%d\ndevices=%d\n", v, n);
  if (n < 1) return fail("no device visible");
  for (int i = 0; i < n; ++i) {
    CUdevice d = 0;
    char text[128] = {};
    CUuuid u{};
    int major = 0, minor = 0;
    get(&d, i);
    name(text, sizeof text - 1, d);
    uuid(&u, d);
    attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
    std::printf("device%d=%s|GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x|sm_%d%d\n", i,
                text, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15], major, minor);
  }
  CUdevice d = 0;
  CUcontext ctx = nullptr;
  get(&d, 0);
  if (const CUresult rc = retain(&ctx, d)) return fail("cuDevicePrimaryCtxRetain failed", rc);
  set(ctx);
  size_t free_bytes = 0, total = 0;
  info(&free_bytes, &total);
  std::printf("free_bytes=%zu\ntotal_bytes=%zu\n", free_bytes, total);
  CUdeviceptr p = 0;
  if (const CUresult rc = alloc(&p, 64u << 20)) return fail("cuMemAlloc of 64 MiB failed", rc);
  release(p);
  std::printf("preflight=ok\n");
  return 0;
}
