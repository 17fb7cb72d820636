// fork() at any instant (issue 25): a CUDA program that forks children all the time beside busy
// threads, as PyTorch's DataLoader, multiprocessing and subprocess do. One thread launches kernels
// (libslice's watcher queries their stream), another asks for more than the cap again and again
// (libslice reconciles through NVML before each refusal), and the main thread forks: each child
// calls NVML (nvmlDeviceGetCount_v2, which takes NVML's lock; every 50th also nvmlInit_v2 and
// nvmlShutdown), begins a stream capture, allocates, and exits. Run with a slow NVML start
// (SIMGPU_NVML_START_US) so that a child can catch a call into NVML that is under way in its parent.
//
//   fork_storm CHILDREN [CAP_MIB]   exit 0 when no child hung; prints the answers the children got
//
// A child that has not exited within 10 s is counted as hung and killed. Without libslice no child
// hangs; under it none may, and each must get the answers the driver and NVML give without it
// (fork_storm_test.sh compares).
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

namespace {

constexpr unsigned long long kMiB = 1ull << 20;

using NvmlCall = int (*)();
using NvmlCount = int (*)(unsigned*);

// The child's work; its answers go to the parent through a pipe, one line. A start of NVML takes the
// slow start's time (without libslice the parent never started NVML): only every 50th child starts it.
[[noreturn]] void child(int out, CUstream stream, NvmlCount count, NvmlCall init, NvmlCall shutdown, bool start) {
  unsigned devices = 0;
  const int nvml_count = count != nullptr ? count(&devices) : -1;
  const int nvml_init = start && init != nullptr ? init() : -1;
  const int nvml_shutdown = nvml_init == 0 ? shutdown() : -1;
  const CUresult capture = cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED);
  CUdeviceptr p = 0;
  const CUresult alloc = cuMemAlloc_v2(&p, kMiB);
  char line[128];
  const int n = std::snprintf(line, sizeof line,
                              "nvmlDeviceGetCount_v2 %d nvmlInit_v2 %d nvmlShutdown %d cuStreamBeginCapture_v2 %d "
                              "cuMemAlloc_v2 %d\n",
                              nvml_count, nvml_init, nvml_shutdown, capture, alloc);
  (void)!write(out, line, static_cast<std::size_t>(n));
  std::exit(0);  // atexit handlers run, as in a Python worker
}

// The child's status within 10 s, or "hung" (killed).
std::string wait_for(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
      return "signal " + std::to_string(WTERMSIG(status));
    }
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return "hung";
}

}  // namespace

int main(int argc, char** argv) {
  const int children = argc > 1 ? std::atoi(argv[1]) : 1000;
  const unsigned long long cap_mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return std::fprintf(stderr, "fork_storm: the driver did not start\n"), 2;
  static const char kPtx[] = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry noop() { ret; }\n";
  CUmodule module = nullptr;
  CUfunction noop = nullptr;
  CUstream stream = nullptr;
  if (cuModuleLoadData(&module, kPtx) != CUDA_SUCCESS || cuModuleGetFunction(&noop, module, "noop") != CUDA_SUCCESS ||
      cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
    return std::fprintf(stderr, "fork_storm: no kernel\n"), 2;
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  const auto init = nvml != nullptr ? reinterpret_cast<NvmlCall>(dlsym(nvml, "nvmlInit_v2")) : nullptr;
  const auto shutdown = nvml != nullptr ? reinterpret_cast<NvmlCall>(dlsym(nvml, "nvmlShutdown")) : nullptr;
  const auto count = nvml != nullptr ? reinterpret_cast<NvmlCount>(dlsym(nvml, "nvmlDeviceGetCount_v2")) : nullptr;

  std::atomic<bool> stop{false};
  std::thread launcher([&] {
    cuCtxSetCurrent(ctx);
    while (!stop.load()) {
      for (int i = 0; i < 16; ++i) cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr);
      cuStreamSynchronize(stream);
    }
  });
  std::thread refuser([&] {
    cuCtxSetCurrent(ctx);
    while (!stop.load()) {
      CUdeviceptr p = 0;
      if (cuMemAlloc_v2(&p, (cap_mib + 1) * kMiB) == CUDA_SUCCESS) cuMemFree_v2(p);
      usleep(1000);
    }
  });

  std::map<std::string, int> answers, statuses;
  for (int i = 0; i < children; ++i) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return 2;
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      child(fds[1], stream, count, init, shutdown, i % 50 == 0);
    }
    close(fds[1]);
    ++statuses[pid > 0 ? wait_for(pid) : "fork failed"];
    char buffer[256] = "";
    const ssize_t n = read(fds[0], buffer, sizeof buffer - 1);
    close(fds[0]);
    ++answers[n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : "no answer\n"];
  }
  stop = true;
  launcher.join();
  refuser.join();
  for (const auto& [status, count] : statuses) std::printf("children %s: %d\n", status.c_str(), count);
  for (const auto& [answer, count] : answers) std::printf("answers %s", answer.c_str());
  return statuses["exit 0"] == children ? 0 : 1;
}
