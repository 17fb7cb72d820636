// Replays every row of the CUDA 13 runtime's cuGetProcAddress_v2 look-ups (tests/data/
// cudart13-procaddr-lookups.tsv) through libslice, the way the runtime does: dlopen("libcuda.so.1"),
// dlsym(cuGetProcAddress_v2), then one look-up per row. Run under LD_PRELOAD=libslice.so with the
// simulator on LD_LIBRARY_PATH. A hooked export must come back as libslice's wrapper of exactly
// that export, every other one as the driver's own, NOT FOUND rows as not found.
// Usage: shim_procaddr_replay LIBSLICE_PATH TSV
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>  // types only: nothing CUDA is linked
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "hook_names.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIBSLICE_PATH TSV\n", argv[0]);
    return 2;
  }
  void* slice = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
  if (slice == nullptr) {
    std::fprintf(stderr, "libslice is not preloaded: %s\n", dlerror());
    return 2;
  }
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProcAddressV2>(dlsym(driver, "cuGetProcAddress_v2"));
  if (get_proc == nullptr || reinterpret_cast<void*>(get_proc) != dlsym(slice, "cuGetProcAddress_v2")) {
    std::fprintf(stderr, "dlsym(libcuda, cuGetProcAddress_v2) is not libslice's wrapper\n");
    return 1;
  }
  // The driver's own exports, asked of the simulator's handle (non-hooked names pass straight to glibc).
  void* sim = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

  std::ifstream tsv(argv[2]);
  std::string line;
  int rows = 0, hooked = 0, driver_own = 0, not_found = 0, failures = 0;
  while (std::getline(tsv, line)) {
    if (line.empty() || line[0] == '#' || line.starts_with("symbol\t")) continue;
    std::istringstream fields(line);
    std::string symbol, version, flags, expected;
    std::getline(fields, symbol, '\t');
    std::getline(fields, version, '\t');
    std::getline(fields, flags, '\t');
    std::getline(fields, expected, '\t');
    ++rows;
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status{};
    const CUresult rc = get_proc(symbol.c_str(), &pfn, std::stoi(version), std::stoull(flags), &status);
    void* want = nullptr;
    const char* kind;
    if (expected == "NOT FOUND") {
      kind = "not found";
      ++not_found;
    } else if (hooked_cuda_exports().contains(expected)) {
      kind = "libslice's wrapper";
      want = dlsym(slice, expected.c_str());
      ++hooked;
    } else {
      kind = "the driver's own";
      want = dlsym(sim, expected.c_str());
      ++driver_own;
    }
    const bool ok = want == nullptr ? (rc != CUDA_SUCCESS || pfn == nullptr)
                                    : (rc == CUDA_SUCCESS && pfn == want);
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "row %d: %s %s %s: expected %s of %s, got rc=%d pfn=%p (want %p)\n", rows,
                   symbol.c_str(), version.c_str(), flags.c_str(), kind, expected.c_str(), rc, pfn, want);
    }
  }
  std::printf("%d rows: %d libslice wrappers, %d driver's own, %d not found; %d failures\n", rows, hooked,
              driver_own, not_found, failures);
  return failures == 0 && rows == 440 ? 0 : 1;
}
