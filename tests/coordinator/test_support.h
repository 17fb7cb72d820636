// Shared by the coordinator test suites: a fresh coordinator directory per test, worker processes
// (tests/coordinator/coordinator_worker) that are always killed and reaped, and read-only looks at
// a tenant's shared counters.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coordinator.h"
#include "coordinator_view.h"
#include "fake_gpu.h"
#include "tenant_file.h"

namespace slice::test {

inline const char* worker_path() { return COORDINATOR_WORKER; }

inline bool is_root() { return geteuid() == 0; }

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs a command, returns its exit status (or -1); its output goes to our standard error.
inline int run_command(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(2, 1);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::vector<std::string> as_user(int uid, std::vector<std::string> argv) {
  std::vector<std::string> out = {"setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid),
                                  "--clear-groups"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

// True when this machine lets us run a command as another user (root and setpriv present).
inline bool can_switch_user() { return is_root() && run_command(as_user(65534, {"true"})) == 0; }

// A child process whose standard input and output are pipes to us. The destructor kills and reaps it.
class Process {
 public:
  explicit Process(const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {  // only async-signal-safe calls until exec: the parent may have threads
      dup2(in[0], 0);
      dup2(out[1], 1);
      execvp(args[0], args.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Process() {
    kill(SIGKILL);
    wait();
    if (to_ >= 0) close(to_);
    if (from_ >= 0) close(from_);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !reaped_; }

  // The next line of its output, or nullopt at end of output or after timeout_ms.
  std::optional<std::string> read_line(int timeout_ms = 10'000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      using std::chrono::milliseconds;
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (from_ < 0 || left.count() <= 0) return std::nullopt;
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[512];
      const ssize_t n = read(from_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  void send_line(const std::string& line = "") {
    const std::string text = line + "\n";
    if (to_ >= 0 && write(to_, text.data(), text.size()) < 0) {
    }
  }
  void kill(int sig) {
    if (running()) ::kill(pid_, sig);
  }
  // Waits for it to end; returns its exit code (128+signal when killed), -1 when there is none.
  int wait() {
    if (!running()) return status_;
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  bool reaped_ = false;
  int status_ = -1;
  std::string buffer_;
};

// The worker's argument list for a tenant of `dir`, then the command and its arguments.
inline std::vector<std::string> worker(const std::string& dir, const std::string& tenant,
                                       const std::vector<std::string>& options,
                                       const std::vector<std::string>& command) {
  std::vector<std::string> argv = {worker_path(), "--dir", dir, "--tenant", tenant};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

// Each test gets its own coordinator directory under the test run's temporary directory (made by
// tests/run_isolated.sh); mounts it made are undone and the folder removed in TearDown.
class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("SLICE_TEST_TMPDIR");
    if (base && *base) {
      root_ = std::string(base) + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
      std::filesystem::create_directories(root_);
    } else {
      char templ[] = "/tmp/slice-coordinator-test.XXXXXX";
      ASSERT_NE(mkdtemp(templ), nullptr);
      root_ = templ;
    }
    dir_ = root_ + "/coordinator";
    policy_dir_ = root_ + "/policy";  // beside it, as coordinator_worker takes it by default
  }
  void TearDown() override {
    processes_.clear();  // kills and reaps every worker first
    for (auto it = mounts_.rbegin(); it != mounts_.rend(); ++it) umount2(it->c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  Process& spawn(const std::vector<std::string>& argv) {
    processes_.push_back(std::make_unique<Process>(argv));
    return *processes_.back();
  }
  Process& spawn_worker(const std::string& tenant, const std::vector<std::string>& options,
                        const std::vector<std::string>& command) {
    return spawn(worker(dir_, tenant, options, command));
  }
  // Mounts a tmpfs of `options` at `path`; false (and nothing mounted) when we may not.
  bool mount_tmpfs(const std::string& path, const std::string& options) {
    std::filesystem::create_directories(path);
    if (mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) != 0) return false;
    mounts_.push_back(path);
    return true;
  }

  std::unique_ptr<Coordinator> join(const std::string& tenant, std::optional<MemoryLimit> memory,
                                    std::vector<int> gpus = {0}, std::vector<std::string>* warnings = nullptr,
                                    std::string* error = nullptr) {
    JoinRequest r;
    r.dir = dir_;
    r.policy_dir = policy_dir_;
    r.tenant = tenant;
    for (int k : gpus) r.devices.push_back(fake_gpu(k, memory));
    std::string e;
    std::vector<std::string> w;
    auto c = Coordinator::join(r, e, w);
    if (warnings) *warnings = w;
    if (error) *error = e;
    return c;
  }

  std::string tenant_path(const std::string& tenant) const { return dir_ + "/tenants/" + tenant; }

  std::string root_, dir_, policy_dir_;
  std::vector<std::unique_ptr<Process>> processes_;
  std::vector<std::string> mounts_;
};

// A tenant's device entry for fake GPU k, read through a read-only mapping (as a tool reads it).
class TenantWatch {
 public:
  TenantWatch(const std::string& dir, const std::string& tenant, int gpu = 0) {
    std::string error;
    handle_ = TenantFileHandle::open(dir, tenant, TenantFileHandle::Mode::read_only, error);
    if (!handle_) {
      ADD_FAILURE() << error;
      return;
    }
    const Uuid uuid = fake_gpu_uuid(gpu);
    for (int i = 0; i < kMaxDevices; ++i) {
      const DeviceEntry& e = handle_->file().devices[i];
      if (e.state.load() == 2 && std::memcmp(e.uuid, uuid.data(), 16) == 0) entry_ = i;
    }
    if (entry_ < 0) ADD_FAILURE() << "tenant " << tenant << " has no entry for fake GPU " << gpu;
  }
  bool ok() const { return handle_ && entry_ >= 0; }
  std::uint64_t total() const { return handle_->file().devices[entry_].used.load(); }
  // The sum over the slots whose process is alive (what a recount would rebuild the total to).
  std::uint64_t live_sum() const {
    std::uint64_t sum = 0;
    for (int i = 0; i < kMaxProcesses; ++i)
      if (handle_->file().slots[i].state.load() == SlotState::live && handle_->slot_held_by_other(i))
        sum += handle_->file().slots[i].devices[entry_].used.load();
    return sum;
  }
  int live_slots() const {
    int n = 0;
    for (int i = 0; i < kMaxProcesses; ++i) n += handle_->file().slots[i].state.load() == SlotState::live;
    return n;
  }
  const TenantFile& file() const { return handle_->file(); }

 private:
  std::unique_ptr<TenantFileHandle> handle_;
  int entry_ = -1;
};

// Checks `total <= cap` over and over on its own thread until stopped, and keeps the extremes.
class InvariantMonitor {
 public:
  InvariantMonitor(const TenantWatch& watch, std::uint64_t cap) : watch_(watch), cap_(cap) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const std::uint64_t t = watch_.total();
        if (t > max_.load()) max_.store(t);
        if (t < min_.load()) min_.store(t);
        if (t > cap_) violations_.fetch_add(1);
        samples_.fetch_add(1);
      }
    });
  }
  ~InvariantMonitor() { stop(); }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t samples() const { return samples_.load(); }
  std::uint64_t violations() const { return violations_.load(); }
  std::uint64_t max_seen() const { return max_.load(); }
  std::uint64_t min_seen() const { return min_.load(); }

 private:
  const TenantWatch& watch_;
  std::uint64_t cap_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> samples_{0}, violations_{0}, max_{0}, min_{~0ull};
  std::thread thread_;
};

// Parses "key=value" from a worker's summary line; 0 when absent.
inline std::uint64_t field(const std::string& line, const std::string& key) {
  const auto at = line.find(key + "=");
  return at == std::string::npos ? 0 : std::strtoull(line.c_str() + at + key.size() + 1, nullptr, 10);
}

inline void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  fchmod(fd, mode);
  close(fd);
}

inline const TenantView* find_tenant(const std::vector<TenantView>& views, const std::string& name) {
  for (const TenantView& v : views)
    if (v.name == name) return &v;
  return nullptr;
}

}  // namespace slice::test
