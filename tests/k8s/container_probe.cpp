// k8s_container_probe: the program the podman tests run inside a container, a CUDA driver-API
// client linked against libcuda.so.1 as a real one is. It says whether libslice.so is loaded in it
// (and whether through LD_PRELOAD), what cuMemGetInfo reports on device 0, tries one allocation
// above its slice and one below, then holds the second until a file appears, so that the host can
// look at the coordinator meanwhile. One "key=value" line per fact, on standard output:
//   k8s_container_probe --over-mib N --under-mib M [--release PATH] [--timeout SECONDS]
// Exit 0 when every call it made answered (whatever the answers), 1 when one failed unexpectedly.
#include <cuda.h>
#include <link.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

const char* error_name(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) return "unknown";
  return name;
}

int find_libslice(dl_phdr_info* info, size_t, void* found) {
  if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libslice.so") != nullptr) {
    *static_cast<std::string*>(found) = info->dlpi_name;
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned long long over_mib = 0, under_mib = 0;
  std::string release;
  double timeout = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--over-mib")
      over_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--under-mib")
      under_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--release")
      release = argv[i + 1];
    else if (k == "--timeout")
      timeout = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: k8s_container_probe --over-mib N --under-mib M [--release PATH] [--timeout S]\n");
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  std::string libslice;
  dl_iterate_phdr(find_libslice, &libslice);
  std::printf("libslice=%s\n", libslice.empty() ? "none" : libslice.c_str());
  const char* preload = std::getenv("LD_PRELOAD");
  std::printf("ld_preload=%s\n", preload != nullptr && *preload ? preload : "unset");

  CUresult r = cuInit(0);
  std::printf("cuInit=%s\n", error_name(r));
  if (r != CUDA_SUCCESS) return 1;
  CUcontext ctx = nullptr;
  if ((r = cuDevicePrimaryCtxRetain(&ctx, 0)) != CUDA_SUCCESS || (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
    std::printf("context=%s\n", error_name(r));
    return 1;
  }
  char uuid_text[64] = {};
  CUuuid uuid{};
  if (cuDeviceGetUuid(&uuid, 0) == CUDA_SUCCESS) {
    const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
    std::snprintf(uuid_text, sizeof uuid_text,
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                  b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  }
  std::printf("device0=%s\n", uuid_text);
  size_t free_bytes = 0, total_bytes = 0;
  r = cuMemGetInfo(&free_bytes, &total_bytes);
  std::printf("mem_get_info=%s\n", error_name(r));
  std::printf("total_bytes=%zu\nfree_bytes=%zu\n", total_bytes, free_bytes);

  if (over_mib) {
    CUdeviceptr p = 0;
    r = cuMemAlloc(&p, over_mib << 20);
    std::printf("alloc_over=%s\n", error_name(r));
    if (r == CUDA_SUCCESS) cuMemFree(p);
  }
  CUdeviceptr held = 0;
  if (under_mib) {
    r = cuMemAlloc(&held, under_mib << 20);
    std::printf("alloc_under=%s\n", error_name(r));
  }
  std::printf("holding\n");
  if (!release.empty()) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
    while (access(release.c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() > until) {
        std::printf("release=timeout\n");
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (held) cuMemFree(held);
  cuDevicePrimaryCtxRelease(0);
  std::printf("done\n");
  return 0;
}
