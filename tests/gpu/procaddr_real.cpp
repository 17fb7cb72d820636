// On a real GPU: replays every cuGetProcAddress_v2 look-up the CUDA 13 runtime makes
// (tests/data/cudart13-procaddr-lookups.tsv) against the installed driver, and records whether the
// driver hands out exactly its exported symbol for each (libslice substitutes its wrapper only for
// the very function the driver answered). An answer that is another export's address (a sibling ABI:
// _v2 for the plain name, _ptsz for the default-stream one) is wrong; one at an address no export
// has is counted apart. Exit status 0 when every row resolves to the recorded export (or is not
// found where recorded so).
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using Init = CUresult (*)(unsigned);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: procaddr_real LOOKUPS.tsv\n");
    return 2;
  }
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::printf("procaddr_real: no driver (%s)\n", dlerror());
    return 2;
  }
  auto init = reinterpret_cast<Init>(dlsym(lib, "cuInit"));
  auto get = reinterpret_cast<GetProcV2>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!init || !get || init(0) != CUDA_SUCCESS) {
    std::printf("procaddr_real: the driver did not initialise\n");
    return 1;
  }
  // Every export the recording names, by address: to tell a sibling's address from an unknown one.
  std::map<void*, std::string> exports;
  {
    std::ifstream all(argv[1]);
    std::string row;
    while (std::getline(all, row)) {
      const std::size_t tab = row.rfind('\t');
      if (tab == std::string::npos || row[0] == '#') continue;
      const std::string name = row.substr(tab + 1);
      if (void* a = dlsym(lib, name.c_str())) exports[a] = name;
    }
  }
  std::ifstream in(argv[1]);
  std::string line;
  int rows = 0, same = 0, other_address = 0, wrong = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("symbol\t", 0) == 0) continue;
    std::istringstream f(line);
    std::string symbol, version, flags, expected;
    std::getline(f, symbol, '\t');
    std::getline(f, version, '\t');
    std::getline(f, flags, '\t');
    std::getline(f, expected);
    ++rows;
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    CUresult r = get(symbol.c_str(), &p, std::stoi(version), std::stoull(flags), &status);
    if (expected == "NOT FOUND") {
      if (r == CUDA_SUCCESS && p) {
        ++wrong;
        std::printf("  %s@%s flags %s: found, recorded as NOT FOUND\n", symbol.c_str(), version.c_str(), flags.c_str());
      } else {
        ++same;
      }
      continue;
    }
    void* exported = dlsym(lib, expected.c_str());
    if (r != CUDA_SUCCESS || !p) {
      ++wrong;
      std::printf("  %s@%s flags %s: not found (expected %s)\n", symbol.c_str(), version.c_str(), flags.c_str(),
                  expected.c_str());
    } else if (p == exported) {
      ++same;
    } else if (exports.count(p)) {
      ++wrong;  // another ABI's export: a wrapper of the recorded one would misread its arguments
      std::printf("  %s@%s flags %s: the address of %s, not of %s\n", symbol.c_str(), version.c_str(), flags.c_str(),
                  exports[p].c_str(), expected.c_str());
    } else {
      ++other_address;  // a valid entry point, but not the exported symbol's address
      std::printf("  %s@%s flags %s: address differs from dlsym(%s)\n", symbol.c_str(), version.c_str(),
                  flags.c_str(), expected.c_str());
    }
  }
  // What the driver answers for an unknown name and for a version older than the symbol: cuda.h
  // documents CUDA_SUCCESS with a NULL pointer, the simulator answers CUDA_ERROR_NOT_FOUND.
  for (auto [name, version] : {std::pair<const char*, int>{"cuNoSuchFunction", 13000}, {"cuMemAllocAsync", 11000}}) {
    void* p = reinterpret_cast<void*>(1);
    CUdriverProcAddressQueryResult status{};
    CUresult r = get(name, &p, version, 0, &status);
    std::printf("procaddr_real: %s@%d -> CUresult %d, pfn %s, status %d\n", name, version, static_cast<int>(r),
                p ? "set" : "NULL", static_cast<int>(status));
  }
  std::printf("procaddr_real: %d rows, %d at the exported address, %d at another address, %d wrong\n", rows, same,
              other_address, wrong);
  return wrong == 0 && rows >= 400 ? 0 : 1;
}
