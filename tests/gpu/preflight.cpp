// The first check on a GPU machine: can a CUDA process start, see its GPUs, make a context and
// allocate? Run plainly and under LD_PRELOAD=libslice.so; what fails here makes every later check
// meaningless, so tests/gpu/run.sh stops short of them with this program's one-line reason. It
// launches no kernel (a driver-API kernel needs a module; the checks after it launch plenty).
// Driver API only, reached with dlopen: nothing to link. Prints key=value lines.
// Exit status: 0 ready; 3 no GPU here (no libcuda.so.1, no device, or a driver that says there is
// none); 1 a GPU whose driver or context does not work.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>

namespace {

constexpr int kNoGpu = 3;

template <typename Fn>
Fn sym(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

int fail(const char* why, int rc = -1) {
  std::printf("preflight=FAIL %s (CUresult %d)\n", why, rc);
  return 1;
}

int no_gpu(const char* why, int rc = -1) {
  std::printf("preflight=NO-GPU %s (CUresult %d)\n", why, rc);
  return kNoGpu;
}

}  // namespace

int main() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("preflight=NO-GPU no libcuda.so.1: %s\n", dlerror());
    return kNoGpu;
  }
  const auto init = sym<CUresult (*)(unsigned)>(lib, "cuInit");
  const auto version = sym<CUresult (*)(int*)>(lib, "cuDriverGetVersion");
  const auto count = sym<CUresult (*)(int*)>(lib, "cuDeviceGetCount");
  const auto get = sym<CUresult (*)(CUdevice*, int)>(lib, "cuDeviceGet");
  const auto name = sym<CUresult (*)(char*, int, CUdevice)>(lib, "cuDeviceGetName");
  auto uuid = sym<CUresult (*)(CUuuid*, CUdevice)>(lib, "cuDeviceGetUuid_v2");
  if (uuid == nullptr) uuid = sym<CUresult (*)(CUuuid*, CUdevice)>(lib, "cuDeviceGetUuid");
  const auto attr = sym<CUresult (*)(int*, CUdevice_attribute, CUdevice)>(lib, "cuDeviceGetAttribute");
  const auto retain = sym<CUresult (*)(CUcontext*, CUdevice)>(lib, "cuDevicePrimaryCtxRetain");
  const auto set = sym<CUresult (*)(CUcontext)>(lib, "cuCtxSetCurrent");
  const auto alloc = sym<CUresult (*)(CUdeviceptr*, size_t)>(lib, "cuMemAlloc_v2");
  const auto release = sym<CUresult (*)(CUdeviceptr)>(lib, "cuMemFree_v2");
  const auto info = sym<CUresult (*)(size_t*, size_t*)>(lib, "cuMemGetInfo_v2");
  if (!init || !version || !count || !get || !name || !uuid || !attr || !retain || !set || !alloc || !release || !info)
    return fail("the driver lacks an export this program uses");
  if (const CUresult rc = init(0)) {
    if (rc == CUDA_ERROR_NO_DEVICE) return no_gpu("cuInit: no device", rc);
    return fail("cuInit failed", rc);
  }
  int v = 0, n = 0;
  if (const CUresult rc = version(&v)) return fail("cuDriverGetVersion failed", rc);
  if (const CUresult rc = count(&n)) return fail("cuDeviceGetCount failed", rc);
  std::printf("driver_version=%d\ndevices=%d\n", v, n);
  if (n < 1) return no_gpu("no device visible", 0);
  for (int i = 0; i < n; ++i) {
    CUdevice d = 0;
    char text[128] = {};
    CUuuid u{};
    int major = 0, minor = 0;
    if (const CUresult rc = get(&d, i)) return fail("cuDeviceGet failed", rc);
    if (const CUresult rc = name(text, sizeof text - 1, d)) return fail("cuDeviceGetName failed", rc);
    if (const CUresult rc = uuid(&u, d)) return fail("cuDeviceGetUuid failed", rc);
    if (attr(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) ||
        attr(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d))
      return fail("cuDeviceGetAttribute (compute capability) failed");
    const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
    std::printf("device%d=%s|GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x|sm_%d%d\n", i,
                text, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15], major, minor);
  }
  CUdevice d = 0;
  CUcontext ctx = nullptr;
  get(&d, 0);
  if (const CUresult rc = retain(&ctx, d)) return fail("cuDevicePrimaryCtxRetain failed", rc);
  if (const CUresult rc = set(ctx)) return fail("cuCtxSetCurrent failed", rc);
  size_t free_bytes = 0, total = 0;
  if (const CUresult rc = info(&free_bytes, &total)) return fail("cuMemGetInfo failed", rc);
  std::printf("free_bytes=%zu\ntotal_bytes=%zu\n", free_bytes, total);
  CUdeviceptr p = 0;
  if (const CUresult rc = alloc(&p, 64u << 20)) return fail("cuMemAlloc of 64 MiB failed", rc);
  if (const CUresult rc = release(p)) return fail("cuMemFree failed", rc);
  std::printf("preflight=ok\n");
  return 0;
}
