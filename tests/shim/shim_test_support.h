// What the GoogleTest programs that run under LD_PRELOAD=libslice.so on the simulated GPU share:
// reading files, spawning this program again as a child (--child MODE) with another environment,
// cuMemGetInfo in one call, and the main function that sets libslice's log file under the test's
// temporary directory (tests/run_isolated.sh).
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace slice_test {

constexpr std::uint64_t kMiB = 1ull << 20;

inline std::string g_self;  // this program, for its children
inline std::string g_log;   // libslice's log file (SLICE_LOG_FILE)

#define CU_OK(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call

// The coordinator and policy folders the test's processes use (tests/run_isolated.sh sets both).
inline std::string coordinator_dir() {
  const char* d = std::getenv("SLICE_COORDINATOR_DIR");
  return d ? d : "";
}
inline std::string policy_dir() {
  const char* d = std::getenv("SLICE_POLICY_DIR");
  return d ? d : "";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline int count_lines(const std::string& text, const std::string& needle) {
  int n = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) n += line.find(needle) != std::string::npos;
  return n;
}

struct MemInfo {
  std::size_t free = 0, total = 0;
};
inline MemInfo mem_info() {
  MemInfo m;
  EXPECT_EQ(cuMemGetInfo_v2(&m.free, &m.total), CUDA_SUCCESS);
  return m;
}

// Starts this program with --child MODE and extra environment ("NAME=" alone removes NAME;
// "NAME=<empty>" sets it to the empty string); its output goes to a file of the test's temporary
// directory.
inline pid_t spawn_child(const std::string& mode, const std::vector<std::string>& env_changes, std::string& out_path) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const std::string& change : env_changes)
      if (entry.substr(0, entry.find('=') + 1) == change.substr(0, change.find('=') + 1)) replaced = true;
    if (!replaced) env.push_back(entry);
  }
  for (const std::string& change : env_changes) {
    const std::string name = change.substr(0, change.find('=') + 1);
    if (change == name + "<empty>")
      env.push_back(name);
    else if (change.back() != '=')
      env.push_back(change);
  }
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  static int serial = 0;
  out_path = std::string(std::getenv("SLICE_TEST_TMPDIR")) + "/child-" + std::to_string(getpid()) + "-" +
             std::to_string(++serial) + ".out";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::string arg_child = "--child", arg_mode = mode;
  char* argv[] = {g_self.data(), arg_child.data(), arg_mode.data(), nullptr};
  pid_t pid = 0;
  const int err = posix_spawn(&pid, g_self.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return err == 0 ? pid : -1;
}

inline int wait_child(pid_t pid) {
  int status = 0;
  if (pid <= 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs a child to its end; returns its exit status and output.
inline int run_child(const std::string& mode, const std::vector<std::string>& env_changes,
                     std::string* output = nullptr) {
  std::string out_path;
  const int rc = wait_child(spawn_child(mode, env_changes, out_path));
  if (output != nullptr) *output = read_file(out_path);
  return rc;
}

// A CUipcMemHandle as hex, for a child's environment.
inline std::string handle_hex(const CUipcMemHandle& handle) {
  std::string hex;
  for (char c : handle.reserved) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    hex += b;
  }
  return hex;
}

// Waits (at most 10 s) until a child's output says `what`.
inline bool wait_for_output(const std::string& path, const std::string& what) {
  for (int i = 0; i < 1000; ++i) {
    if (read_file(path).find(what) != std::string::npos) return true;
    usleep(10000);
  }
  return false;
}

// A spin kernel: the simulated GPU runs it for its first parameter, in nanoseconds.
inline CUfunction spin_kernel() {
  static const char kPtx[] =
      ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry spin(.param .u64 spin_param_0) { ret; }\n";
  CUmodule module = nullptr;
  CUfunction f = nullptr;
  if (cuModuleLoadData(&module, kPtx) != CUDA_SUCCESS || cuModuleGetFunction(&f, module, "spin") != CUDA_SUCCESS)
    return nullptr;
  return f;
}

inline CUresult launch_spin(CUfunction f, unsigned long long ns, CUstream stream) {
  void* params[] = {&ns};
  return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
}

// main() of such a program: `--child MODE` runs child_main(MODE), anything else the tests.
inline int shim_test_main(int argc, char** argv, int (*child_main)(const std::string& mode)) {
  g_self = "/proc/self/exe";
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) g_self.assign(path, static_cast<std::size_t>(n));
  if (argc == 3 && std::string(argv[1]) == "--child") return child_main(argv[2]);
  const char* tmp = std::getenv("SLICE_TEST_TMPDIR");
  if (tmp == nullptr) {
    std::fprintf(stderr, "run through tests/run_isolated.sh\n");
    return 2;
  }
  g_log = std::string(tmp) + "/slice.log";
  setenv("SLICE_LOG_FILE", g_log.c_str(), 1);  // read at the first CUDA call
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace slice_test
