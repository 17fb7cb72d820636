// Process trees under libslice (issue 26: children never escape their slice's budget), driven by
// lineage_test.py. Every mode starts CUDA the way programs do (dlopen of the driver), and says which
// tenant libslice put it in (slice_get_info).
//
//   lineage_probe alloc MIB                  allocates MIB: "tenant T alloc MIB ok|refused"
//   lineage_probe hold MIB HOW -- CMD...     allocates MIB ("tenant T holds MIB"), then runs CMD, and
//                                            exits with its status. HOW:
//     snapshot      execve with a copy of the environment taken at main, before any CUDA call
//     before-cuda   CMD started before this process's first CUDA call; it goes on when told
//     nondumpable   as snapshot, from a process that is not dumpable (prctl): other users and its
//                   own user's processes may not read its /proc/<pid>/ns
//     orphan        through `sh -c 'CMD &'`: the shell exits at once and CMD's parent is gone;
//                   this process leads its process group, as a shell's job or a service does
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "slice/slice.h"

extern char** environ;

namespace {

using CUresult = int;

std::string tenant_name() {
  using GetInfo = int (*)(int, slice_info*);
  const auto get = reinterpret_cast<GetInfo>(dlsym(RTLD_DEFAULT, "slice_get_info"));
  slice_info info{};
  info.size = sizeof info;
  if (get == nullptr || get(0, &info) != SLICE_OK) return "(no libslice session)";
  return info.tenant;
}

// cuInit, the primary context, current; then an allocation of `mib`: true when granted.
bool start_and_allocate(unsigned long long mib) {
  void* cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cu == nullptr) {
    std::fprintf(stderr, "lineage_probe: no libcuda.so.1\n");
    std::exit(2);
  }
  const auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(cu, "cuInit"));
  const auto get = reinterpret_cast<CUresult (*)(int*, int)>(dlsym(cu, "cuDeviceGet"));
  const auto retain = reinterpret_cast<CUresult (*)(void**, int)>(dlsym(cu, "cuDevicePrimaryCtxRetain"));
  const auto set = reinterpret_cast<CUresult (*)(void*)>(dlsym(cu, "cuCtxSetCurrent"));
  const auto alloc = reinterpret_cast<CUresult (*)(unsigned long long*, std::size_t)>(dlsym(cu, "cuMemAlloc_v2"));
  int dev = 0;
  void* ctx = nullptr;
  if (init(0) != 0 || get(&dev, 0) != 0 || retain(&ctx, dev) != 0 || set(ctx) != 0) {
    std::fprintf(stderr, "lineage_probe: the driver did not start\n");
    std::exit(2);
  }
  unsigned long long p = 0;
  return alloc(&p, static_cast<std::size_t>(mib) << 20) == 0;
}

int wait_status(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The environment as it was at the start, before any CUDA call (Go's os/exec keeps such a copy).
  std::vector<std::string> snapshot;
  for (char** e = environ; *e != nullptr; ++e) snapshot.emplace_back(*e);
  if (argc >= 3 && std::strcmp(argv[1], "alloc") == 0) {
    // A child told to wait (before-cuda) goes on once its parent has allocated.
    if (const char* go = std::getenv("LINEAGE_GO_FILE"))
      for (int i = 0; i < 1000 && access(go, F_OK) != 0; ++i) usleep(10000);
    const unsigned long long mib = std::strtoull(argv[2], nullptr, 10);
    const bool ok = start_and_allocate(mib);
    std::printf("tenant %s alloc %llu %s\n", tenant_name().c_str(), mib, ok ? "ok" : "refused");
    return 0;
  }
  if (argc < 6 || std::strcmp(argv[1], "hold") != 0 || std::strcmp(argv[4], "--") != 0) {
    std::fprintf(stderr,
                 "usage: lineage_probe alloc MIB | hold MIB snapshot|nondumpable|before-cuda|orphan -- CMD...\n");
    return 2;
  }
  const unsigned long long mib = std::strtoull(argv[2], nullptr, 10);
  const std::string how = argv[3];
  char** command = argv + 5;
  if (how == "orphan") setpgid(0, 0);  // a job of its own, as a shell starts it
  if (how == "nondumpable") prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  pid_t child = 0;
  std::string go_file;
  if (how == "before-cuda") {
    go_file = std::string(std::getenv("SLICE_TEST_TMPDIR")) + "/go-" + std::to_string(getpid());
    setenv("LINEAGE_GO_FILE", go_file.c_str(), 1);
    if (posix_spawn(&child, command[0], nullptr, nullptr, command, environ) != 0) return 2;
  }
  if (!start_and_allocate(mib)) {
    std::printf("tenant %s could not hold %llu\n", tenant_name().c_str(), mib);
    return 1;
  }
  std::printf("tenant %s holds %llu\n", tenant_name().c_str(), mib);
  if (how == "before-cuda") {
    const int fd = ::open(go_file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
    return wait_status(child);
  }
  if (how == "snapshot" || how == "nondumpable") {
    std::vector<char*> envp;
    for (std::string& e : snapshot) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (posix_spawn(&child, command[0], nullptr, nullptr, command, envp.data()) != 0) return 2;
    return wait_status(child);
  }
  if (how == "orphan") {
    // sh runs CMD in the background and exits: CMD's parent is gone before CMD starts CUDA. Its
    // output goes where this process's does; this process waits for CMD's line, then ends.
    std::string line;
    for (char** a = command; *a != nullptr; ++a) line += std::string(" '") + *a + "'";
    const std::string done = std::string(std::getenv("SLICE_TEST_TMPDIR")) + "/orphan-" + std::to_string(getpid());
    const std::string script = "(sleep 0.3;" + line + " > '" + done + ".tmp'; mv '" + done + ".tmp' '" + done + "') &";
    char* sh_argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), const_cast<char*>(script.c_str()), nullptr};
    if (posix_spawn(&child, "/bin/sh", nullptr, nullptr, sh_argv, environ) != 0) return 2;
    wait_status(child);
    for (int i = 0; i < 1000 && access(done.c_str(), F_OK) != 0; ++i) usleep(10000);
    if (FILE* f = std::fopen(done.c_str(), "re")) {
      char buffer[512];
      while (std::fgets(buffer, sizeof buffer, f) != nullptr) std::fputs(buffer, stdout);
      std::fclose(f);
      std::remove(done.c_str());
      return 0;
    }
    std::printf("the orphan said nothing\n");
    return 1;
  }
  std::fprintf(stderr, "lineage_probe: unknown way '%s'\n", how.c_str());
  return 2;
}
