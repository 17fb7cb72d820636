// On a real GPU: replays every cuGetProcAddress_v2 look-up the CUDA 13 runtime makes
// (tests/data/cudart13-procaddr-lookups.tsv) against the installed driver, and records whether the
// driver hands out exactly its exported symbol for each (libslice substitutes its wrapper only for
// the very function the driver answered). An answer that is another export's address (a sibling ABI:
// _v2 or _v3 for the plain name, _ptsz or _ptds for the default-stream one, or the name without its
// suffix; each row's name is looked up in all these spellings) is wrong; one at an address no export
// has is counted apart. Exit status 0 when every row resolves to the recorded export (or is not
// found where recorded so).
// Usage: procaddr_real LOOKUPS.tsv [--answers FILE]
//   --answers: writes the driver's own answer to each row (symbol, version, flags, then the answer's
//   offset from libcuda's load address in hex, or NULL), for tests/shim/procaddr_replay.cpp
//   --driver-answers, which compares the rows libslice leaves to the driver with these.
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using Init = CUresult (*)(unsigned);

namespace {

// The export's name without an ABI suffix (_v2, _v3..., _ptsz, _ptds, in any order).
std::string base_name(std::string name) {
  for (bool cut = true; cut;) {
    cut = false;
    for (const char* suffix : {"_ptsz", "_ptds"}) {
      const std::size_t n = std::strlen(suffix);
      if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) name.resize(name.size() - n), cut = true;
    }
    const std::size_t v = name.rfind("_v");
    if (v != std::string::npos && v + 2 < name.size() &&
        name.find_first_not_of("0123456789", v + 2) == std::string::npos)
      name.resize(v), cut = true;
  }
  return name;
}

// Every spelling of a sibling ABI of `name`.
std::vector<std::string> siblings(const std::string& name) {
  const std::string base = base_name(name);
  std::vector<std::string> out;
  for (const char* version : {"", "_v2", "_v3", "_v4"}) {
    for (const char* stream : {"", "_ptsz", "_ptds"}) out.push_back(base + version + stream);
  }
  for (const char* suffix : {"_v2", "_v3", "_ptsz", "_ptds"}) out.push_back(name + suffix);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const char* answers_path = nullptr;
  if (argc == 4 && std::strcmp(argv[2], "--answers") == 0)
    answers_path = argv[3];
  else if (argc != 2) {
    std::fprintf(stderr, "usage: procaddr_real LOOKUPS.tsv [--answers FILE]\n");
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
      if (name == "NOT FOUND") continue;
      if (void* a = dlsym(lib, name.c_str())) exports.emplace(a, name);
      for (const std::string& other : siblings(name)) {
        if (void* a = dlsym(lib, other.c_str())) exports.emplace(a, other);
      }
    }
  }
  // Where libcuda is loaded: answers are written as offsets from it, which another process (with
  // the library at another address) can compare.
  struct link_map* map = nullptr;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
    std::printf("procaddr_real: dlinfo(libcuda) failed\n");
    return 1;
  }
  std::FILE* answers = answers_path ? std::fopen(answers_path, "w") : nullptr;
  if (answers_path && !answers) {
    std::printf("procaddr_real: cannot write %s\n", answers_path);
    return 1;
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
    if (answers) {
      if (r == CUDA_SUCCESS && p)
        std::fprintf(answers, "%s\t%s\t%s\t%lx\n", symbol.c_str(), version.c_str(), flags.c_str(),
                     static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(p) - map->l_addr));
      else
        std::fprintf(answers, "%s\t%s\t%s\tNULL\n", symbol.c_str(), version.c_str(), flags.c_str());
    }
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
      std::printf("  %s@%s flags %s: address differs from dlsym(%s)\n", symbol.c_str(), version.c_str(), flags.c_str(),
                  expected.c_str());
    }
  }
  // What the driver answers for an unknown name and for a version older than the symbol: driver
  // 580.159.04 answered CUDA_SUCCESS, a NULL pointer and the status (1, 2), as the simulator now does.
  for (auto [name, version] : {std::pair<const char*, int>{"cuNoSuchFunction", 13000}, {"cuMemAllocAsync", 11000}}) {
    void* p = reinterpret_cast<void*>(1);
    CUdriverProcAddressQueryResult status{};
    CUresult r = get(name, &p, version, 0, &status);
    std::printf("procaddr_real: %s@%d -> CUresult %d, pfn %s, status %d\n", name, version, static_cast<int>(r),
                p ? "set" : "NULL", static_cast<int>(status));
  }
  if (answers) std::fclose(answers);
  std::printf("procaddr_real: %d rows, %d at the exported address, %d at another address, %d wrong\n", rows, same,
              other_address, wrong);
  return wrong == 0 && rows >= 400 ? 0 : 1;
}
