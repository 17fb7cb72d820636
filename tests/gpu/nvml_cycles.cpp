// What a start and a stop of NVML leave in a process, on the real driver (issue 25, a fact recorded
// for docs/memory.md's choice of one start per process): N cycles of nvmlInit_v2, a look (a handle,
// the running processes) and nvmlShutdown, without libslice, with the process's pthread keys,
// descriptors, threads and resident memory before the first start, after the first cycle and after
// the last, and the start times.
//
//   nvml_cycles [N]      key=value lines; exit 0 when every cycle succeeded
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Residue {
  int next_key = 0, descriptors = 0, threads = 0;
  long resident_kib = 0;
};

int count_entries(const char* folder) {
  int n = 0;
  if (DIR* d = opendir(folder)) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

Residue residue() {
  Residue r;
  pthread_key_t k;
  if (pthread_key_create(&k, nullptr) == 0) {
    r.next_key = static_cast<int>(k);
    pthread_key_delete(k);
  }
  r.descriptors = count_entries("/proc/self/fd") - 1;  // less the one reading it
  r.threads = count_entries("/proc/self/task");
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::strncmp(line, "VmRSS:", 6) == 0) r.resident_kib = std::atol(line + 6);
    std::fclose(f);
  }
  return r;
}

double now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

void print(const char* at, const Residue& r, const Residue& base) {
  std::printf("%s_keys=%d\n%s_descriptors=%d\n%s_threads=%d\n%s_resident_kib=%ld\n", at, r.next_key - base.next_key, at,
              r.descriptors - base.descriptors, at, r.threads - base.threads, at, r.resident_kib - base.resident_kib);
}

}  // namespace

int main(int argc, char** argv) {
  const int cycles = argc > 1 ? std::atoi(argv[1]) : 200;
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) return std::printf("error=no NVML: %s\n", dlerror()), 1;
  using Call = int (*)();
  const auto init = reinterpret_cast<Call>(dlsym(nvml, "nvmlInit_v2"));
  const auto shutdown = reinterpret_cast<Call>(dlsym(nvml, "nvmlShutdown"));
  const auto by_index = reinterpret_cast<int (*)(unsigned, void**)>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  const auto processes =
      reinterpret_cast<int (*)(void*, unsigned*, void*)>(dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (!init || !shutdown || !by_index || !processes) return std::printf("error=NVML lacks a function\n"), 1;
  const Residue base = residue();
  Residue first;
  std::vector<double> start_ms;
  for (int i = 0; i < cycles; ++i) {
    const double t0 = now_ms();
    if (init() != 0) return std::printf("error=nvmlInit_v2 failed at cycle %d\n", i), 1;
    start_ms.push_back(now_ms() - t0);
    void* device = nullptr;
    unsigned char infos[64 * 64];  // nvmlProcessInfo_t is 24-40 bytes: room for 64 of any layout
    unsigned count = 64;
    if (by_index(0, &device) != 0 || processes(device, &count, infos) != 0)
      return std::printf("error=the look failed at cycle %d\n", i), 1;
    if (shutdown() != 0) return std::printf("error=nvmlShutdown failed at cycle %d\n", i), 1;
    if (i == 0) first = residue();
  }
  const Residue last = residue();
  std::printf("cycles=%d\n", cycles);
  print("first_cycle", first, base);
  print("all_cycles", last, base);
  std::printf("per_later_cycle_keys=%.2f\nper_later_cycle_descriptors=%.2f\nper_later_cycle_threads=%.2f\n",
              cycles > 1 ? double(last.next_key - first.next_key) / (cycles - 1) : 0.0,
              cycles > 1 ? double(last.descriptors - first.descriptors) / (cycles - 1) : 0.0,
              cycles > 1 ? double(last.threads - first.threads) / (cycles - 1) : 0.0);
  std::printf("first_start_ms=%.2f\n", start_ms[0]);
  std::sort(start_ms.begin() + 1, start_ms.end());
  if (cycles > 1) std::printf("later_start_median_ms=%.2f\n", start_ms[1 + (cycles - 1) / 2]);
  std::printf("nvml_cycles=ok\n");
  return 0;
}
