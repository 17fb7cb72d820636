// Replays every row of the CUDA 13 runtime's cuGetProcAddress_v2 look-ups (tests/data/
// cudart13-procaddr-lookups.tsv) through libslice, the way the runtime does: dlopen("libcuda.so.1"),
// dlsym(cuGetProcAddress_v2), then one look-up per row. Run under LD_PRELOAD=libslice.so with the
// simulator on LD_LIBRARY_PATH. A hooked export must come back as libslice's wrapper of exactly
// that export, every other one as the driver's own, NOT FOUND rows as not found.
// Usage: shim_procaddr_replay [--driver-answers FILE] LIBSLICE_PATH TSV
//   The driver's own answer is dlsym(driver, export), which is what the simulator hands out. A real
//   driver may answer at another address (an internal entry point): --driver-answers takes what it
//   answered without libslice (tests/gpu/procaddr_real.cpp --answers: each row's answer as an offset
//   from libcuda's load address, or NULL) and compares the rows left to the driver with that instead.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>  // types only: nothing CUDA is linked
#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "hook_names.h"

int main(int argc, char** argv) {
  const char* answers_path = nullptr;
  if (argc == 5 && std::strcmp(argv[1], "--driver-answers") == 0) {
    answers_path = argv[2];
    argv += 2;
    argc -= 2;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s [--driver-answers FILE] LIBSLICE_PATH TSV\n", argv[0]);
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
  // Or the driver's own answers recorded without libslice: "symbol\tversion\tflags" -> offset or NULL.
  std::map<std::string, std::string> recorded;
  std::uintptr_t driver_base = 0;
  if (answers_path != nullptr) {
    std::ifstream answers(answers_path);
    std::string row;
    while (std::getline(answers, row)) {
      const std::size_t tab = row.rfind('\t');
      if (tab != std::string::npos) recorded[row.substr(0, tab)] = row.substr(tab + 1);
    }
    struct link_map* map = nullptr;
    if (recorded.empty() || dlinfo(driver, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
      std::fprintf(stderr, "no driver answers in %s, or no link map of libcuda\n", answers_path);
      return 1;
    }
    driver_base = map->l_addr;
  }

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
    } else if (answers_path != nullptr) {
      kind = "the driver's own answer";
      const auto answer = recorded.find(symbol + "\t" + version + "\t" + flags);
      if (answer == recorded.end()) {
        ++failures;
        std::fprintf(stderr, "row %d: %s %s %s: not in %s\n", rows, symbol.c_str(), version.c_str(), flags.c_str(),
                     answers_path);
        continue;
      }
      if (answer->second != "NULL")
        want = reinterpret_cast<void*>(driver_base + std::stoul(answer->second, nullptr, 16));
      ++driver_own;
    } else {
      kind = "the driver's own";
      want = dlsym(sim, expected.c_str());
      ++driver_own;
    }
    const bool ok = want == nullptr ? (rc != CUDA_SUCCESS || pfn == nullptr) : (rc == CUDA_SUCCESS && pfn == want);
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "row %d: %s %s %s: expected %s of %s, got rc=%d pfn=%p (want %p)\n", rows, symbol.c_str(),
                   version.c_str(), flags.c_str(), kind, expected.c_str(), rc, pfn, want);
    }
  }
  std::printf("%d rows: %d libslice wrappers, %d driver's own, %d not found; %d failures\n", rows, hooked, driver_own,
              not_found, failures);
  return failures == 0 && rows == 440 ? 0 : 1;
}
