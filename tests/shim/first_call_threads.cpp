// libslice starts up at the first CUDA/NVML call, from whichever thread makes it: many threads
// making their first calls at once must all get the driver's answers (run under LD_PRELOAD with
// the simulator on LD_LIBRARY_PATH).
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

int main() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr || nvml == nullptr) {
    std::fprintf(stderr, "no simulated driver on LD_LIBRARY_PATH\n");
    return 2;
  }
  std::atomic<bool> go{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) {
      }
      if (i % 2 == 0) {
        auto init = reinterpret_cast<int (*)(unsigned)>(dlsym(cuda, "cuInit"));
        Dl_info info{};
        if (init == nullptr || dladdr(reinterpret_cast<void*>(init), &info) == 0 ||
            std::strstr(info.dli_fname, "libslice.so") == nullptr || init(0) != 0) {
          ++failures;
        }
      } else {
        auto init = reinterpret_cast<int (*)()>(dlsym(nvml, "nvmlInit_v2"));
        if (init == nullptr || init() != 0) ++failures;
      }
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  std::printf("first calls from 16 threads: %d failures\n", failures.load());
  return failures == 0 ? 0 : 1;
}
