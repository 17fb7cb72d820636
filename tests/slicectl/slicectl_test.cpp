// slicectl against a live coordinator: tenants and processes come from slicectl_tenant_holder
// (real processes on fake GPUs, no CUDA), slicectl runs as a subprocess, and its JSON is checked by
// check_status_json.py. Covers status (JSON and table; the compute figures from a history written
// into a tenant file, and the settings its processes publish), set (policy file, merge, effect on a live
// process's cap, validation, root), gc after SIGKILL, unreadable tenant files, odd bytes in the
// text a tenant writes, and the usage errors and help texts.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "policy.h"
#include "tenant_file.h"

namespace {

constexpr const char* kGpuA = "GPU-11111111-1111-1111-1111-111111111111";
constexpr const char* kGpuB = "GPU-22222222-2222-2222-2222-222222222222";
const std::string kDeviceA = "11:Fake GPU A:25769803776";  // 24 GiB
const std::string kDeviceB = "22:Fake GPU B:8589934592";   // 8 GiB
constexpr std::uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

std::string scratch() {
  const char* t = std::getenv("SLICE_TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The first line that starts with `prefix`, or "".
std::string line_starting(const std::string& text, const std::string& prefix) {
  for (const std::string& l : lines_of(text))
    if (l.rfind(prefix, 0) == 0) return l;
  return "";
}

struct Result {
  int rc = -1;
  std::string out, err;
};

std::ostream& operator<<(std::ostream& o, const Result& r) {
  return o << "exit " << r.rc << "\n--- stdout\n" << r.out << "--- stderr\n" << r.err;
}

// Runs argv (argv[0] looked up in PATH) with `env` added, standard input from `input`; waits at
// most 30 s.
Result run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
           const std::string& input = "") {
  static int n = 0;
  const std::string base = scratch() + "/run" + std::to_string(getpid()) + "." + std::to_string(n++);
  const std::string out = base + ".out", err = base + ".err", in = base + ".in";
  std::ofstream(in) << input;
  const pid_t pid = fork();
  if (pid == 0) {
    const int i = open(in.c_str(), O_RDONLY), o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644),
              e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(i, 0);
    dup2(o, 1);
    dup2(e, 2);
    for (const std::string& kv : env) putenv(strdup(kv.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  Result r;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.err = "(killed after 30 s)\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err += read_file(err);
  unlink(in.c_str());
  unlink(out.c_str());
  unlink(err.c_str());
  return r;
}

Result slicectl(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), SLICECTL);
  return run(args, env);
}

// One process of a tenant (tenant_holder.cpp), alive until stopped or killed.
class Holder {
 public:
  Holder(const std::string& dir, std::vector<std::string> args) {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      setenv("SLICE_COORDINATOR_DIR", dir.c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(TENANT_HOLDER)};
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(TENANT_HOLDER, argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = to_child[1];
    out_ = from_child[0];
    ready_ = read_line() == "ready";
  }
  ~Holder() { stop(); }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }

  // Sends one command line and returns the one-line answer.
  std::string ask(const std::string& command) {
    const std::string line = command + "\n";
    if (write(in_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "(write failed)";
    return read_line();
  }

  void kill9() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    close_pipes();
  }

  // Closes its standard input: it leaves the coordinator and exits.
  void stop() {
    if (pid_ <= 0) return;
    close_pipes();
    int status = 0;
    for (int i = 0; i < 500 && waitpid(pid_, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }

 private:
  std::string read_line(int timeout_ms = 10000) {
    while (true) {
      const auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) != 1) return "(no answer)";
      char buf[256];
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) return "(closed)";
      buffer_.append(buf, n);
    }
  }
  void close_pipes() {
    if (in_ >= 0) close(in_);
    if (out_ >= 0) close(out_);
    in_ = out_ = -1;
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  bool ready_ = false;
  std::string buffer_;
};

// Asks the holder for its cap on device 0 until it is `bytes` (3 s at most).
bool wait_for_cap(Holder& h, std::uint64_t bytes) {
  for (int i = 0; i < 60; ++i) {
    if (h.ask("cap 0") == std::to_string(bytes)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// `slicectl status --json` checked against the contract and flattened (check_status_json.py).
Result checked_json(const std::string& json) { return run({PYTHON, CHECK_STATUS_JSON}, {}, json); }

// One device entry of a tenant file and its history, mapped for writing.
struct Entry {
  std::unique_ptr<slice::TenantFileHandle> file;
  slice::DeviceEntry* device = nullptr;
  slice::ReceivedHistory* history = nullptr;
};

class SlicectlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string root = scratch() + "/" + info->name();
    mkdir(root.c_str(), 0755);
    dir_ = root + "/coordinator";
    // Each test its own policy folder and usage archive, which slicectl and the holders inherit.
    policy_dir_ = root + "/policy";
    setenv("SLICE_POLICY_DIR", policy_dir_.c_str(), 1);
    setenv("SLICECTL_ARCHIVE", (root + "/usage.sqlite3").c_str(), 1);
  }

  std::unique_ptr<Holder> holder(std::vector<std::string> args) {
    auto h = std::make_unique<Holder>(dir_, std::move(args));
    EXPECT_TRUE(h->ready()) << "the tenant holder did not start";
    return h;
  }

  // The flattened, checked JSON status (fails the test if the JSON is off).
  std::string json_status() {
    const Result s = slicectl({"status", "--json", "--coordinator", dir_});
    EXPECT_EQ(s.rc, 0) << s;
    const Result c = checked_json(s.out);
    EXPECT_EQ(c.rc, 0) << c << "\nJSON was: " << s.out;
    return c.out;
  }

  std::string table_status() {
    const Result s = slicectl({"status", "--coordinator", dir_});
    EXPECT_EQ(s.rc, 0) << s;
    return s.out;
  }

  // The tenant's total on its device entry `device` as the tenant file holds it.
  std::uint64_t tenant_total(const std::string& tenant, int device) {
    std::string error;
    auto h = slice::TenantFileHandle::open(dir_, tenant, slice::TenantFileHandle::Mode::read_only, error);
    EXPECT_NE(h, nullptr) << error;
    return h ? h->file().devices[device].used.load() : 0;
  }

  // The tenant file's device entry for the GPU `uuid` ("GPU-..."), mapped for writing, as the
  // tenant's own processes have it; null (and a failure) when the tenant has no entry for it.
  Entry entry(const std::string& tenant, const std::string& uuid) {
    std::string error;
    Entry e;
    e.file = slice::TenantFileHandle::open(dir_, tenant, slice::TenantFileHandle::Mode::read_write, error);
    EXPECT_NE(e.file, nullptr) << error;
    for (int d = 0; e.file && d < slice::kMaxDevices; ++d) {
      slice::DeviceEntry& candidate = e.file->file().devices[d];
      if (candidate.state.load() == 2 && slice::uuid_text(candidate.uuid) == uuid) {
        e.device = &candidate;
        e.history = &e.file->file().history[d];
      }
    }
    EXPECT_NE(e.device, nullptr) << "tenant '" << tenant << "' has no entry for " << uuid;
    return e;
  }

  bool root() const { return geteuid() == 0; }

  std::string dir_, policy_dir_;
};

TEST_F(SlicectlTest, HelpDocumentsEveryOption) {
  const Result main_help = slicectl({"--help"});
  EXPECT_EQ(main_help.rc, 0) << main_help;
  for (const char* s : {"usage: slicectl SUBCOMMAND", "status [--json]", "set TENANT", "gc [TENANT]",
                        "--coordinator DIR", "$SLICE_COORDINATOR_DIR", "/dev/shm/libslice"})
    EXPECT_TRUE(contains(main_help.out, s)) << s << "\n" << main_help;

  const Result status = slicectl({"status", "--help"});
  EXPECT_EQ(status.rc, 0) << status;
  for (const char* s :
       {"usage: slicectl status", "--json", "--coordinator DIR", "memory_limit_bytes", "compute_used_1s", "null"})
    EXPECT_TRUE(contains(status.out, s)) << s << "\n" << status;

  const Result set = slicectl({"set", "--help"});
  EXPECT_EQ(set.rc, 0) << set;
  for (const char* s : {"usage: slicectl set TENANT", "--memory Q|P%|none", "--memory-gpu UUID=Q", "--compute P",
                        "--limit P", "--priority high|normal|low", "--coordinator DIR", "root"})
    EXPECT_TRUE(contains(set.out, s)) << s << "\n" << set;

  const Result gc = slicectl({"gc", "--help"});
  EXPECT_EQ(gc.rc, 0) << gc;
  for (const char* s : {"usage: slicectl gc [TENANT]", "--coordinator DIR"})
    EXPECT_TRUE(contains(gc.out, s)) << s << "\n" << gc;

  EXPECT_EQ(slicectl({"help", "set"}).out, set.out);
  EXPECT_EQ(slicectl({"set", "inference", "-h"}).out, set.out);
}

TEST_F(SlicectlTest, UsageErrorsExitTwoWithUsage) {
  struct Case {
    std::vector<std::string> args;
    std::string message, usage;
  };
  const std::vector<Case> cases = {
      {{}, "a subcommand is needed", "usage: slicectl SUBCOMMAND"},
      {{"bogus"}, "unknown subcommand 'bogus'", "usage: slicectl SUBCOMMAND"},
      {{"--bogus"}, "unknown option '--bogus'", "usage: slicectl SUBCOMMAND"},
      {{"status", "--bogus"}, "unknown option '--bogus'", "usage: slicectl status"},
      {{"status", "extra"}, "unexpected argument 'extra'", "usage: slicectl status"},
      {{"status", "--coordinator"}, "--coordinator needs a value", "usage: slicectl status"},
      {{"gc", "a", "b"}, "unexpected argument 'b'", "usage: slicectl gc"},
      {{"gc", "--json"}, "unknown option '--json'", "usage: slicectl gc"},
      {{"set", "t", "--memory", "1Gi", "--json"}, "unknown option '--json'", "usage: slicectl set"},
  };
  for (const Case& c : cases) {
    const Result r = slicectl(c.args);
    EXPECT_EQ(r.rc, 2) << r;
    EXPECT_TRUE(contains(r.err, c.message)) << c.message << "\n" << r;
    EXPECT_TRUE(contains(r.err, c.usage)) << c.usage << "\n" << r;
    EXPECT_EQ(r.out, "") << r;
  }
}

// A machine where no libslice process has run yet is idle, not broken: status, metrics, usage and gc
// answer with no tenants and exit 0, so that monitoring and `status --json | jq` work from boot on.
TEST_F(SlicectlTest, MissingCoordinatorIsAnIdleMachine) {
  const std::string missing = dir_ + "/nothing-here";
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"status", "--coordinator", missing},
                                             {"gc", "--coordinator", missing},
                                             {"usage", "--coordinator", missing}}) {
    const Result r = slicectl(args);
    EXPECT_EQ(r.rc, 0) << r;
    EXPECT_EQ(r.err, "") << r;
  }
  const Result table = slicectl({"status", "--coordinator", missing});
  EXPECT_TRUE(contains(table.out, "coordinator " + missing + ": idle (no libslice process has run with it yet)"))
      << table;
  const Result json = slicectl({"status", "--json", "--coordinator", missing});
  EXPECT_EQ(json.rc, 0) << json;
  EXPECT_TRUE(contains(json.out, "\"idle\":true")) << json;
  EXPECT_EQ(checked_json(json.out).rc, 0) << json;
  const Result metrics = slicectl({"metrics", "--coordinator", missing});
  EXPECT_EQ(metrics.rc, 0) << metrics;
  EXPECT_TRUE(contains(metrics.out, "\nslice_coordinator_warnings 0\n")) << metrics;
  EXPECT_FALSE(contains(metrics.out, "\nslice_tenant_")) << metrics << "a tenant's sample on an idle machine";
  // The default comes from SLICE_COORDINATOR_DIR; reading never makes the folder.
  const Result r = slicectl({"status", "--json"}, {"SLICE_COORDINATOR_DIR=" + missing});
  EXPECT_EQ(r.rc, 0) << r;
  EXPECT_TRUE(contains(r.out, "\"coordinator\":\"" + missing + "\"")) << r;
  struct stat st {};
  EXPECT_NE(stat(missing.c_str(), &st), 0) << "a reader made the coordinator folder";
  // But a tenant that is not there, or a file where the folder should be, is an error.
  const Result gc = slicectl({"gc", "some-tenant", "--coordinator", missing});
  EXPECT_EQ(gc.rc, 1) << gc;
  EXPECT_TRUE(contains(gc.err, "no tenant 'some-tenant'")) << gc;
  std::ofstream(dir_ + ".file") << "x";
  const Result f = slicectl({"status", "--coordinator", dir_ + ".file"});
  EXPECT_EQ(f.rc, 1) << f;
  EXPECT_TRUE(contains(f.err, "not a directory")) << f;
}

TEST_F(SlicectlTest, EmptyCoordinator) {
  mkdir(dir_.c_str(), 01777);
  mkdir((dir_ + "/tenants").c_str(), 01777);
  const Result table = slicectl({"status", "--coordinator", dir_});
  EXPECT_EQ(table.rc, 0) << table;
  EXPECT_TRUE(contains(table.out, "idle (no libslice process has run with it yet); 0 GPUs")) << table;
  const Result json = slicectl({"status", "--json", "--coordinator", dir_});
  EXPECT_EQ(json.rc, 0) << json;
  EXPECT_TRUE(contains(json.out, "{\"devices\":[]")) << json;
  EXPECT_EQ(checked_json(json.out).rc, 0);
  const Result gc = slicectl({"gc", "--coordinator", dir_});
  EXPECT_EQ(gc.rc, 0) << gc;
  EXPECT_TRUE(contains(gc.out, "no tenants")) << gc;
}

TEST_F(SlicectlTest, StatusJsonGathersDevicesAcrossTenants) {
  auto server = holder({"--tenant",   "inference",
                        "--device",   kDeviceB,
                        "--device",   kDeviceA,
                        "--memory",   "4Gi",
                        "--compute",  "30",
                        "--limit",    "50",
                        "--priority", "high",
                        "--reserve",  "0:" + std::to_string(256 * kMiB),
                        "--reserve",  "1:" + std::to_string(kGiB),
                        "--comm",     "server"});
  auto worker =
      holder({"--tenant", "inference", "--device", kDeviceA, "--memory", "4Gi", "--compute", "30", "--limit", "50",
              "--priority", "high", "--reserve", "0:" + std::to_string(512 * kMiB), "--comm", "worker"});
  auto trainer = holder({"--tenant", "training", "--device", kDeviceA, "--reserve", "0:" + std::to_string(2 * kGiB),
                         "--comm", "trainer"});
  const std::string s = json_status();
  const auto has = [&](const std::string& line) { EXPECT_TRUE(contains(s, line + "\n")) << line << "\n" << s; };
  const std::string server_pid = std::to_string(server->pid()), worker_pid = std::to_string(worker->pid());
  // Devices in UUID order, whichever tenant met them first; used = the sum over tenants.
  has(std::string("device 0 ") + kGpuA + " \"Fake GPU A\" 25769803776 " + std::to_string(kGiB + 512 * kMiB + 2 * kGiB));
  has(std::string("device 1 ") + kGpuB + " \"Fake GPU B\" 8589934592 " + std::to_string(256 * kMiB));
  has(std::string("tenant ") + kGpuA + " inference high 4294967296 " + std::to_string(kGiB + 512 * kMiB) +
      " 30 50 false 0");
  has(std::string("tenant ") + kGpuA + " training normal null " + std::to_string(2 * kGiB) + " 100 100 false 0");
  has(std::string("tenant ") + kGpuB + " inference high 4294967296 " + std::to_string(256 * kMiB) + " 30 50 false 0");
  has(std::string("compute ") + kGpuA + " inference null null");  // no compute history yet
  has(std::string("compute ") + kGpuA + " training null null");
  has(std::string("process ") + kGpuA + " inference " + server_pid + " \"server\" " + std::to_string(kGiB));
  has(std::string("process ") + kGpuA + " inference " + worker_pid + " \"worker\" " + std::to_string(512 * kMiB));
  has(std::string("process ") + kGpuB + " inference " + server_pid + " \"server\" " + std::to_string(256 * kMiB));
  has(std::string("process ") + kGpuB + " inference " + worker_pid + " \"worker\" 0");
  has(std::string("process ") + kGpuA + " training " + std::to_string(trainer->pid()) + " \"trainer\" " +
      std::to_string(2 * kGiB));
  EXPECT_FALSE(contains(s, "warning")) << s;

  // The coordinator from SLICE_COORDINATOR_DIR, or --coordinator before the subcommand, or with '='.
  // (The memory held over time grows from one reading to the next: left out of the comparison.)
  const auto same = [](const Result& r) {
    return std::regex_replace(r.out, std::regex("\"memory_byte_seconds_total\":[0-9.e+]*"), "");
  };
  const std::string plain = same(slicectl({"status", "--json", "--coordinator", dir_}));
  EXPECT_EQ(same(slicectl({"status", "--json"}, {"SLICE_COORDINATOR_DIR=" + dir_})), plain);
  EXPECT_EQ(same(slicectl({"--coordinator", dir_, "status", "--json"})), plain);
  EXPECT_EQ(same(slicectl({"status", "--json", "--coordinator=" + dir_})), plain);
  EXPECT_EQ(same(slicectl({"status", "--json", "--coordinator", dir_}, {"SLICE_COORDINATOR_DIR=/nonexistent"})), plain);
}

TEST_F(SlicectlTest, StatusTableIsAlignedWithUnits) {
  auto server = holder({"--tenant", "inference", "--device", kDeviceA, "--memory", "4Gi", "--compute", "30", "--limit",
                        "50", "--priority", "high", "--reserve", "0:" + std::to_string(kGiB), "--comm", "server"});
  auto trainer = holder({"--tenant", "training", "--device", kDeviceA, "--reserve", "0:" + std::to_string(512 * kMiB),
                         "--comm", "trainer"});
  const std::string t = table_status();
  EXPECT_TRUE(contains(t, "2 tenants on 1 GPU\n")) << t;
  EXPECT_TRUE(contains(t, std::string("GPU 0  Fake GPU A  ") + kGpuA + "  1.5 GiB of 24.0 GiB used (6%)\n")) << t;
  const std::string header = line_starting(t, "  TENANT / PROCESS");
  const std::string inference = line_starting(t, "  inference");
  const std::string process = line_starting(t, "    " + std::to_string(server->pid()) + " server");
  const std::string training = line_starting(t, "  training");
  ASSERT_NE(header, "") << t;
  ASSERT_NE(inference, "") << t;
  ASSERT_NE(process, "") << t;
  ASSERT_NE(training, "") << t;
  // Tenant: used, overhead (not reconciled here: "-"), cap, use of the cap, share, limit, priority;
  // no compute history yet: "-".
  std::istringstream row(inference);
  std::vector<std::string> cells;
  for (std::string c; row >> c;) cells.push_back(c);
  const std::vector<std::string> expected = {"inference", "1.0", "GiB", "-",    "4.0", "GiB",
                                             "25%",       "30%", "50%", "high", "-",   "-"};
  EXPECT_EQ(cells, expected) << t;
  EXPECT_TRUE(contains(training, "512.0 MiB")) << t;
  EXPECT_TRUE(contains(training, "none")) << t;
  EXPECT_TRUE(contains(training, "normal")) << t;
  EXPECT_TRUE(contains(process, "1.0 GiB")) << t;
  // Aligned: the values end where their header ends.
  const auto end_of = [](const std::string& line, const std::string& cell) { return line.find(cell) + cell.size(); };
  EXPECT_EQ(end_of(header, "MEMORY USED"), end_of(inference, "1.0 GiB")) << t;
  EXPECT_EQ(end_of(header, "MEMORY USED"), end_of(training, "512.0 MiB")) << t;
  EXPECT_EQ(end_of(header, "MEMORY USED"), end_of(process, "1.0 GiB")) << t;
  EXPECT_EQ(end_of(header, "CAP"), end_of(inference, "4.0 GiB")) << t;
  EXPECT_EQ(end_of(header, "CAP"), end_of(training, "none")) << t;
  EXPECT_EQ(header.find("PRIORITY"), inference.find("high")) << t;
  EXPECT_EQ(header.find("PRIORITY"), training.find("normal")) << t;
  // Nothing to warn about.
  EXPECT_FALSE(contains(t, "warning")) << t;
  EXPECT_FALSE(contains(t, "dead")) << t;
  EXPECT_FALSE(contains(t, "administrator")) << t;
}

// Writes what libslice's compute watchers would have written over the last 12 s into a tenant's
// entry for a GPU: its cumulative received_ns and the history of it, one sample at the start of
// each 250 ms step, the newest at the start of step `newest`; `received(s)`: what it got in step s.
void write_compute(Entry& e, std::uint64_t newest, std::uint64_t base_ns,
                   const std::function<std::uint64_t(std::uint64_t)>& received) {
  std::uint64_t total = base_ns;
  for (std::uint64_t s = newest - slice::kHistorySamples + 1; s <= newest; ++s) {
    e.history->total_ns[s % slice::kHistorySamples].store(total);
    total += received(s);
  }
  e.history->step.store(newest);
  e.device->received_ns.store(e.history->total_ns[newest % slice::kHistorySamples].load());  // none since
}

TEST_F(SlicectlTest, StatusShowsComputeReceivedAsTheSchedulerMeasuresIt) {
  constexpr std::uint64_t kMs = 1'000'000, kStep = slice::kHistoryStepNs;
  // The histories below reach 50 s into the monotonic clock's past (time since boot).
  if (slice::monotonic_ns() < 60'000 * kMs) GTEST_SKIP() << "the machine started less than a minute ago";
  // busy's entry for GPU A is its second (it met B first): each entry has its own history.
  auto busy = holder({"--tenant", "busy", "--device", kDeviceB, "--device", kDeviceA, "--compute", "30", "--limit",
                      "50", "--priority", "high"});
  auto greedy = holder({"--tenant", "greedy", "--device", kDeviceA});
  auto idle = holder({"--tenant", "idle", "--device", kDeviceA});
  Entry b = entry("busy", kGpuA), g = entry("greedy", kGpuA);
  ASSERT_NE(b.device, nullptr);
  ASSERT_NE(g.device, nullptr);
  // Ending at step N, busy received (per 250 ms step): 200 ms in N-47..N-42 (more than ten seconds
  // ago), nothing in N-41..N-38, 125 ms in N-37..N-6, nothing in N-5..N-2, 237 ms in N-1, nothing
  // since N. Read within 750 ms of N's start, the last second starts in N-4..N-2 and the last ten
  // in N-40..N-38, where it received nothing: received_over gives exactly 237 ms over the second,
  // 32 * 125 + 237 = 4237 ms over the ten, whenever slicectl reads it. What a wrong measure would
  // give instead: 10 s for both, 42.4%; since the oldest sample, 54.4%; the cumulative total
  // (an hour before the history) over the window, 100%; only since the newest sample, 0%.
  const auto busy_profile = [&](std::uint64_t n) {
    return [n](std::uint64_t s) -> std::uint64_t {
      if (s < n - 41) return 200 * kMs;
      if (s < n - 37) return 0;
      if (s < n - 5) return 125 * kMs;
      return s == n - 1 ? 237 * kMs : 0;
    };
  };
  // greedy's file claims more than the device had: 5 s of it in the last second (a tenant writes its
  // own file), which is clamped to the whole second; over ten seconds that is half.
  const auto write_all = [&](std::uint64_t n) {
    write_compute(b, n, 3600'000 * kMs, busy_profile(n));
    write_compute(g, n, 0, [](std::uint64_t) { return std::uint64_t{0}; });
    g.device->received_ns.store(5000 * kMs);
  };
  // slicectl must read within 750 ms of the start of step N (see above); on a machine too loaded for
  // that, write the history again for the step of now and retry.
  const auto status = [&](const std::vector<std::string>& args) {
    for (int attempt = 0; attempt < 10; ++attempt) {
      const std::uint64_t n = slice::monotonic_ns() / kStep;
      write_all(n);
      Result r = slicectl(args);
      if (slice::monotonic_ns() < (n + 3) * kStep) return r;
    }
    ADD_FAILURE() << "slicectl never read the coordinator within 750 ms of the history's newest step";
    return Result{};
  };

  const Result table = status({"status", "--coordinator", dir_});
  ASSERT_EQ(table.rc, 0) << table;
  const auto last_two = [](const std::string& line) {
    std::istringstream row(line);
    std::vector<std::string> cells;
    for (std::string c; row >> c;) cells.push_back(c);
    return cells.size() < 2 ? cells : std::vector<std::string>(cells.end() - 2, cells.end());
  };
  const std::string header = line_starting(table.out, "  TENANT / PROCESS");
  const std::string busy_row = line_starting(table.out, "  busy "), greedy_row = line_starting(table.out, "  greedy "),
                    idle_row = line_starting(table.out, "  idle ");
  EXPECT_EQ(last_two(busy_row), (std::vector<std::string>{"23.7%", "42.4%"})) << table;
  EXPECT_EQ(last_two(greedy_row), (std::vector<std::string>{"100.0%", "50.0%"})) << table;
  EXPECT_EQ(last_two(idle_row), (std::vector<std::string>{"-", "-"})) << table;  // no history yet
  // The share, limit and priority beside them are the tenant's own (no policy).
  for (const char* cell : {" 30% ", " 50% ", " high "}) EXPECT_TRUE(contains(busy_row, cell)) << cell << "\n" << table;
  // Aligned under their headers.
  const auto end_of = [](const std::string& line, const std::string& cell) { return line.rfind(cell) + cell.size(); };
  EXPECT_EQ(end_of(header, "COMPUTE 1s"), end_of(busy_row, "23.7%")) << table;
  EXPECT_EQ(end_of(header, "10s"), end_of(busy_row, "42.4%")) << table;
  EXPECT_EQ(end_of(header, "10s"), end_of(greedy_row, "50.0%")) << table;

  const Result json = status({"status", "--json", "--coordinator", dir_});
  ASSERT_EQ(json.rc, 0) << json;
  // The exact fractions, not rounded: 0.237 and 0.4237.
  EXPECT_TRUE(contains(json.out, "\"compute_used_1s\":0.237,\"compute_used_10s\":0.4237,")) << json;
  const Result checked = checked_json(json.out);
  ASSERT_EQ(checked.rc, 0) << checked << "\nJSON was: " << json.out;
  const auto has = [&](const std::string& line) {
    EXPECT_TRUE(contains(checked.out, line + "\n")) << line << "\n" << checked.out;
  };
  has(std::string("tenant ") + kGpuA + " busy high null 0 30 50 false 0");
  has(std::string("compute ") + kGpuA + " busy 0.237 0.4237");
  has(std::string("compute ") + kGpuA + " greedy 1.0 0.5");
  has(std::string("compute ") + kGpuA + " idle null null");
  has(std::string("compute ") + kGpuB + " busy null null");  // nothing recorded on B

  // A history whose newest sample is long past (the tenant's processes stopped): nothing received.
  write_compute(b, slice::monotonic_ns() / kStep - 200, 3600'000 * kMs, [&](std::uint64_t) { return 100 * kMs; });
  const std::string t = table_status();
  EXPECT_EQ(last_two(line_starting(t, "  busy ")), (std::vector<std::string>{"0.0%", "0.0%"})) << t;
  EXPECT_TRUE(contains(json_status(), std::string("compute ") + kGpuA + " busy 0.0 0.0\n"));
}

// The share, limit and priority slicectl shows are the ones the tenant's processes schedule by and
// publish in its file for the other tenants' schedulers (per GPU): its registered ones (a GPU may
// have a share of its own), then an administrator's.
TEST_F(SlicectlTest, StatusComputeSettingsAreTheSchedulers) {
  // Device 0 is GPU B, device 1 GPU A, with a share of its own.
  auto server = holder({"--tenant", "inference", "--device", kDeviceB, "--device", kDeviceA, "--compute", "30",
                        "--compute-gpu", "1:40", "--limit", "50", "--priority", "high"});
  const auto published = [&](const std::string& uuid) {
    Entry e = entry("inference", uuid);
    if (e.device == nullptr) return std::string();
    return std::to_string(e.device->compute_share.load()) + " " + std::to_string(e.device->compute_limit.load()) + " " +
           std::string(slice::to_string(slice::priority_from_stored(e.device->compute_priority.load())));
  };
  const auto cells_of = [](const std::string& line) {
    std::istringstream row(line);
    std::vector<std::string> cells;
    for (std::string c; row >> c;) cells.push_back(c);
    return cells;
  };
  EXPECT_EQ(server->ask("publish 0"), "30 50 high");
  EXPECT_EQ(server->ask("publish 1"), "40 50 high");
  EXPECT_EQ(published(kGpuB), "30 50 high");
  EXPECT_EQ(published(kGpuA), "40 50 high");
  std::string s = json_status();
  EXPECT_TRUE(contains(s, std::string("tenant ") + kGpuA + " inference high null 0 40 50 false 0\n")) << s;
  EXPECT_TRUE(contains(s, std::string("tenant ") + kGpuB + " inference high null 0 30 50 false 0\n")) << s;
  // GPU 0 is A (UUID order): its row comes first.
  EXPECT_EQ(cells_of(line_starting(table_status(), "  inference")),
            (std::vector<std::string>{"inference", "0", "B", "-", "none", "-", "40%", "50%", "high", "-", "-"}));

  if (!root()) GTEST_SKIP() << "slicectl set needs root";
  ASSERT_EQ(slicectl({"set", "inference", "--compute", "20", "--priority", "low", "--coordinator", dir_}).rc, 0);
  // The process takes the policy within a second (it joined before there was any policy folder);
  // the policy's share holds on every GPU.
  std::string now;
  for (int i = 0; i < 60 && (now = server->ask("publish 1")) != "20 50 low"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(now, "20 50 low");
  EXPECT_EQ(server->ask("publish 0"), "20 50 low");
  EXPECT_EQ(published(kGpuA), "20 50 low");
  EXPECT_EQ(published(kGpuB), "20 50 low");
  s = json_status();
  EXPECT_TRUE(contains(s, std::string("tenant ") + kGpuA + " inference low null 0 20 50 true 0\n")) << s;
  EXPECT_TRUE(contains(s, std::string("tenant ") + kGpuB + " inference low null 0 20 50 true 0\n")) << s;
  EXPECT_EQ(cells_of(line_starting(table_status(), "  inference")),
            (std::vector<std::string>{"inference", "*", "0", "B", "-", "none", "-", "20%", "50%", "low", "-", "-"}));
}

TEST_F(SlicectlTest, SetWritesPolicyThatALiveProcessTakes) {
  if (!root()) GTEST_SKIP() << "slicectl set needs root";
  auto server = holder({"--tenant", "inference", "--device", kDeviceA, "--memory", "4Gi", "--reserve",
                        "0:" + std::to_string(kGiB), "--comm", "server"});
  ASSERT_EQ(server->ask("cap 0"), std::to_string(4 * kGiB));

  const Result r = slicectl(
      {"set", "inference", "--memory", "1536Mi", "--compute", "30", "--priority", "high", "--coordinator", dir_});
  ASSERT_EQ(r.rc, 0) << r;
  for (const char* s : {"memory_limit = 1536Mi", "compute_share = 30", "priority = high", "cap 1.5 GiB (uses 1.0 GiB)",
                        "next allocation"})
    EXPECT_TRUE(contains(r.out, s)) << s << "\n" << r;
  const std::string file = policy_dir_ + "/inference";
  std::string policy = read_file(file);
  EXPECT_TRUE(contains(policy, "memory_limit = 1536Mi\n")) << policy;
  EXPECT_TRUE(contains(policy, "compute_share = 30\n")) << policy;
  EXPECT_TRUE(contains(policy, "priority = high\n")) << policy;
  EXPECT_FALSE(contains(policy, "compute_limit")) << policy;
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0644u);

  // The live process takes the new cap: it joined before the coordinator had any policy, so it
  // finds the policy folder's generation counter within a second (PolicyWatcher looks once a
  // second); from then on every change holds at its next reservation. 1 GiB held, 1.5 GiB cap.
  EXPECT_TRUE(wait_for_cap(*server, 1536 * kMiB));
  EXPECT_EQ(server->ask("reserve 0 " + std::to_string(kGiB)),
            "refused " + std::to_string(kGiB) + " " + std::to_string(1536 * kMiB));
  EXPECT_EQ(server->ask("reserve 0 " + std::to_string(512 * kMiB)), "ok");
  EXPECT_EQ(server->ask("cap 0"), std::to_string(1536 * kMiB));

  std::string s = json_status();
  EXPECT_TRUE(contains(s, std::string("tenant ") + kGpuA + " inference high " + std::to_string(1536 * kMiB) + " " +
                              std::to_string(1536 * kMiB) + " 30 100 true 0"))
      << s;
  const std::string t = table_status();
  EXPECT_TRUE(contains(line_starting(t, "  inference"), "inference *")) << t;
  EXPECT_TRUE(contains(t, "* limits set by an administrator (slicectl set)")) << t;

  // Options not given keep their values.
  ASSERT_EQ(slicectl({"set", "inference", "--limit", "60", "--coordinator", dir_}).rc, 0);
  policy = read_file(file);
  for (const char* line :
       {"memory_limit = 1536Mi\n", "compute_share = 30\n", "compute_limit = 60\n", "priority = high\n"})
    EXPECT_TRUE(contains(policy, line)) << line << "\n" << policy;

  // A per-GPU cap wins over --memory there; UUIDs in any case.
  const Result gpu = slicectl({"set", "inference", "--memory-gpu", "gpu-11111111-1111-1111-1111-111111111111=2Gi",
                               "--memory", "1Gi", "--coordinator", dir_});
  ASSERT_EQ(gpu.rc, 0) << gpu;
  policy = read_file(file);
  EXPECT_TRUE(contains(policy, std::string("memory_limit.") + kGpuA + " = 2Gi\n")) << policy;
  EXPECT_TRUE(contains(policy, "memory_limit = 1Gi\n")) << policy;
  EXPECT_EQ(server->ask("cap 0"), std::to_string(2 * kGiB));
  // Removing it lets --memory hold again; a percentage is of the device.
  ASSERT_EQ(slicectl({"set", "inference", "--memory-gpu", std::string(kGpuA) + "=none", "--memory", "25%",
                      "--coordinator", dir_})
                .rc,
            0);
  EXPECT_FALSE(contains(read_file(file), "memory_limit.")) << read_file(file);
  EXPECT_EQ(server->ask("cap 0"), std::to_string(6 * kGiB));
  // none: the policy's cap goes, the tenant's own (4 GiB) holds again; the rest stays.
  const Result none = slicectl({"set", "inference", "--memory", "none", "--coordinator", dir_});
  ASSERT_EQ(none.rc, 0) << none;
  EXPECT_FALSE(contains(none.out, "memory_limit")) << none;
  EXPECT_TRUE(contains(none.out, "compute_limit = 60")) << none;
  EXPECT_FALSE(contains(read_file(file), "memory_limit")) << read_file(file);
  EXPECT_EQ(server->ask("cap 0"), std::to_string(4 * kGiB));
}

TEST_F(SlicectlTest, SetBeforeTheTenantStarts) {
  if (!root()) GTEST_SKIP() << "slicectl set needs root";
  auto other = holder({"--tenant", "other", "--device", kDeviceA});
  const Result r = slicectl({"set", "later", "--memory", "2Gi", "--coordinator", dir_});
  ASSERT_EQ(r.rc, 0) << r;
  EXPECT_TRUE(contains(r.out, "tenant 'later' has not started yet")) << r;
  // Its file is made now, root's, so that its processes can never delete it and start from zero.
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/tenants/later").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0644u) << "without --group only root writes it (its group may be shared)";
  const Result g = slicectl({"set", "later", "--group", "1234", "--coordinator", dir_});
  ASSERT_EQ(g.rc, 0) << g;
  ASSERT_EQ(stat((dir_ + "/tenants/later").c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 1234u) << "--group names the group whose members run the tenant";
  EXPECT_EQ(st.st_mode & 07777, 0664u);
  const Result bad = slicectl({"set", "later", "--group", "no-such-group-here", "--coordinator", dir_});
  EXPECT_EQ(bad.rc, 2) << bad;
  auto later = holder({"--tenant", "later", "--device", kDeviceA, "--memory", "8Gi"});
  EXPECT_EQ(later->ask("cap 0"), std::to_string(2 * kGiB));
  EXPECT_EQ(later->ask("reserve 0 " + std::to_string(3 * kGiB)), "refused 0 " + std::to_string(2 * kGiB));
}

TEST_F(SlicectlTest, SetValidatesEveryOption) {
  auto server = holder({"--tenant", "inference", "--device", kDeviceA});
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> message;  // parts the error must contain
  };
  const std::string uuid = kGpuA;
  const std::vector<Case> cases = {
      {{"--memory", "12X"}, {"--memory '12X' is not valid", "example: --memory 4Gi"}},
      {{"--memory", "0"}, {"--memory '0' is not valid", "example: --memory 4Gi"}},
      {{"--memory", "-1Gi"}, {"--memory '-1Gi' is not valid", "example: --memory 4Gi"}},
      {{"--memory", "101%"}, {"--memory '101%' is not valid", "example: --memory 4Gi"}},
      {{"--memory=99999999999Ei"}, {"--memory '99999999999Ei' is not valid"}},
      {{"--compute", "0"}, {"--compute '0' is not valid", "example: --compute 30"}},
      {{"--compute", "101"}, {"--compute '101' is not valid", "example: --compute 30"}},
      {{"--compute", "half"}, {"--compute 'half' is not valid", "example: --compute 30"}},
      {{"--limit", "150"}, {"--limit '150' is not valid", "example: --limit 50"}},
      {{"--priority", "urgent"}, {"--priority 'urgent' is not valid", "example: --priority high"}},
      {{"--memory-gpu", "8Gi"}, {"--memory-gpu '8Gi' is not valid", "expected UUID=Q", "example: --memory-gpu GPU-"}},
      {{"--memory-gpu", "GPU-xyz=8Gi"}, {"'GPU-xyz' is not a GPU UUID", "example: --memory-gpu GPU-"}},
      {{"--memory-gpu", uuid + "=12X"}, {"--memory-gpu '" + uuid + "=12X' is not valid", "example: --memory-gpu GPU-"}},
      {{"--memory", "1Gi\x1b[2J"}, {"--memory '1Gi\\x1b[2J' is not valid"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"set", "inference", "--coordinator", dir_};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Result r = slicectl(args);
    EXPECT_EQ(r.rc, 2) << r;
    for (const std::string& part : c.message) EXPECT_TRUE(contains(r.err, part)) << part << "\n" << r;
    EXPECT_EQ(r.out, "") << r;
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> usage_cases = {
      {{"set", "--memory", "1Gi"}, "which tenant?"},
      {{"set", "inference"}, "nothing to set"},
      {{"set", "inference", "--memory"}, "--memory needs a value"},
      {{"set", "bad/name", "--memory", "1Gi"}, "tenant 'bad/name' is not a valid name"},
      {{"set", "inference", "--bogus", "1"}, "unknown option '--bogus'"},
  };
  for (const auto& [args, message] : usage_cases) {
    const Result r = slicectl(args);
    EXPECT_EQ(r.rc, 2) << r;
    EXPECT_TRUE(contains(r.err, message)) << message << "\n" << r;
  }
  // None of them wrote a policy (the folder itself may exist: root's processes create it at start).
  struct stat st {};
  EXPECT_NE(stat((policy_dir_ + "/inference").c_str(), &st), 0);
  EXPECT_NE(stat((policy_dir_ + "/inference.tmp").c_str(), &st), 0);
}

#ifdef SIMGPU_LIB_DIR
// Where NVML is there (here the simulated GPU's), an idle machine lists its GPUs: index, UUID, name
// and size as NVML has them, with no tenant; metrics has their gauges and no tenant's series.
TEST_F(SlicectlTest, IdleMachineListsTheGpusNvmlSees) {
  const std::vector<std::string> gpu = {"LD_LIBRARY_PATH=" SIMGPU_LIB_DIR, "SIMGPU_DEVICES=2", "SIMGPU_MEMORY=8Gi,4Gi",
                                        "SIMGPU_STATE=" + dir_ + ".simgpu"};
  const Result json = slicectl({"status", "--json", "--coordinator", dir_}, gpu);
  ASSERT_EQ(json.rc, 0) << json;
  EXPECT_EQ(checked_json(json.out).rc, 0) << json;
  for (const std::string part :
       {"\"index\":0,\"uuid\":\"GPU-516d696d-6770-4075-8000-000000000000\"",
        "\"index\":1,\"uuid\":\"GPU-516d696d-6770-4075-8000-000000000001\"", "\"total_bytes\":8589934592",
        "\"total_bytes\":4294967296", "\"tenants\":[]", "\"idle\":true"})
    EXPECT_TRUE(contains(json.out, part)) << part << "\n" << json;
  const Result table = slicectl({"status", "--coordinator", dir_}, gpu);
  ASSERT_EQ(table.rc, 0) << table;
  EXPECT_TRUE(contains(table.out, "idle (no libslice process has run with it yet); 2 GPUs")) << table;
  EXPECT_TRUE(contains(table.out, "GPU 1  ")) << table;
  EXPECT_TRUE(contains(table.out, "(no tenant)")) << table;
  const Result metrics = slicectl({"metrics", "--coordinator", dir_}, gpu);
  ASSERT_EQ(metrics.rc, 0) << metrics;
  EXPECT_TRUE(contains(
      metrics.out, "slice_device_memory_total_bytes{device=\"1\",uuid=\"GPU-516d696d-6770-4075-8000-000000000001\""))
      << metrics;
  EXPECT_FALSE(contains(metrics.out, "\nslice_tenant_")) << metrics;
  // Without NVML: no GPU listed, and why.
  const Result bare = slicectl({"status", "--coordinator", dir_});
  EXPECT_EQ(bare.rc, 0) << bare;
  EXPECT_TRUE(contains(bare.out, "NVML is not there")) << bare;
}
#endif

// --remove takes the policy away (the tenant's own limits hold again), and --group is kept in the
// policy, where `slicectl prepare` finds it after a reboot.
TEST_F(SlicectlTest, SetKeepsTheGroupAndRemoveTakesThePolicyAway) {
  if (!root()) GTEST_SKIP() << "slicectl set needs root";
  auto server = holder({"--tenant", "inference", "--device", kDeviceA, "--memory", "4Gi"});
  ASSERT_EQ(slicectl({"set", "inference", "--memory", "1Gi", "--group", "4242", "--coordinator", dir_}).rc, 0);
  EXPECT_TRUE(contains(read_file(policy_dir_ + "/inference"), "group = 4242\n"));
  ASSERT_EQ(slicectl({"set", "inference", "--compute", "30", "--coordinator", dir_}).rc, 0);
  EXPECT_TRUE(contains(read_file(policy_dir_ + "/inference"), "group = 4242\n")) << "a later set keeps the group";
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/tenants/inference").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 4242u);
  EXPECT_TRUE(wait_for_cap(*server, kGiB));

  const Result mixed = slicectl({"set", "inference", "--remove", "--memory", "1Gi", "--coordinator", dir_});
  EXPECT_EQ(mixed.rc, 2) << mixed;
  const Result removed = slicectl({"set", "inference", "--remove", "--coordinator", dir_});
  ASSERT_EQ(removed.rc, 0) << removed;
  EXPECT_TRUE(contains(removed.out, "policy of tenant 'inference' removed")) << removed;
  EXPECT_NE(stat((policy_dir_ + "/inference").c_str(), &st), 0);
  EXPECT_TRUE(wait_for_cap(*server, 4 * kGiB)) << "its own 4 GiB holds again";
  const Result again = slicectl({"set", "inference", "--remove", "--coordinator", dir_});
  EXPECT_EQ(again.rc, 0) << again;
  EXPECT_TRUE(contains(again.out, "had no policy")) << again;
}

// `slicectl prepare`: root only; makes the coordinator and policy folders and the live files of the
// tenants policies manage, with their groups.
TEST_F(SlicectlTest, PrepareMakesManagedTenantsFiles) {
  if (!root()) {
    const Result r = slicectl({"prepare", "--coordinator", dir_});
    EXPECT_EQ(r.rc, 1) << r;
    EXPECT_TRUE(contains(r.err, "only root")) << r;
    return;
  }
  ASSERT_EQ(slicectl({"set", "team-a", "--memory", "1Gi", "--group", "4242", "--coordinator", dir_}).rc, 0);
  ASSERT_EQ(slicectl({"set", "team-b", "--compute", "20", "--coordinator", dir_}).rc, 0);
  std::filesystem::remove_all(dir_);  // a reboot
  const Result r = slicectl({"prepare", "--coordinator", dir_});
  ASSERT_EQ(r.rc, 0) << r;
  EXPECT_TRUE(contains(r.out, "tenant 'team-a': live file ready, writable by group 4242")) << r;
  EXPECT_TRUE(contains(r.out, "tenant 'team-b': live file ready, root's alone")) << r;
  struct stat st {};
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  ASSERT_EQ(stat((dir_ + "/tenants/team-a").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 4242u);
  EXPECT_EQ(st.st_mode & 0777, 0664u);
  // Again: nothing changes, nothing fails.
  EXPECT_EQ(slicectl({"prepare", "--coordinator", dir_}).rc, 0);
  // A coordinator folder a user made first (its process started before the boot step): said so.
  std::filesystem::remove_all(dir_);
  ASSERT_EQ(mkdir(dir_.c_str(), 01777), 0);
  ASSERT_EQ(chown(dir_.c_str(), 65534, 65534), 0);
  const Result taken = slicectl({"prepare", "--coordinator", dir_});
  EXPECT_EQ(taken.rc, 1) << taken;
  EXPECT_TRUE(contains(taken.err, "was made by user 65534")) << taken;
}

TEST_F(SlicectlTest, SetNeedsRoot) {
  auto server = holder({"--tenant", "inference", "--device", kDeviceA});
  std::vector<std::string> args = {"set", "inference", "--memory", "1Gi", "--coordinator", dir_};
  if (root()) {
    // As nobody.
    args.insert(args.begin(), {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SLICECTL});
  } else {
    args.insert(args.begin(), SLICECTL);
  }
  const Result r = run(args);
  EXPECT_EQ(r.rc, 1) << r;
  EXPECT_TRUE(contains(r.err, "only root may set limits")) << r;
  struct stat st {};
  EXPECT_NE(stat((policy_dir_ + "/inference").c_str(), &st), 0);
}

TEST_F(SlicectlTest, GcReapsDeadProcesses) {
  const std::vector<std::string> a = {"--tenant", "a", "--device", kDeviceA, "--memory", "2Gi"};
  auto first = holder([&] {
    auto v = a;
    v.insert(v.end(), {"--reserve", "0:" + std::to_string(kGiB)});
    return v;
  }());
  auto second = holder([&] {
    auto v = a;
    v.insert(v.end(), {"--reserve", "0:" + std::to_string(512 * kMiB)});
    return v;
  }());
  auto b = holder({"--tenant", "b", "--device", kDeviceA, "--reserve", "0:" + std::to_string(kMiB)});
  first->kill9();

  std::string t = table_status();
  EXPECT_TRUE(contains(t, "tenant 'a': 1 dead process not yet reaped (slicectl gc a)")) << t;
  std::string s = json_status();
  // Usage shown is the live processes'; the tenant's total still holds the dead one's gigabyte.
  EXPECT_TRUE(contains(s, std::string("tenant ") + kGpuA + " a normal " + std::to_string(2 * kGiB) + " " +
                              std::to_string(512 * kMiB) + " 100 100 false 1"))
      << s;
  EXPECT_EQ(tenant_total("a", 0), kGiB + 512 * kMiB);

  const Result gc = slicectl({"gc", "a", "--coordinator", dir_});
  EXPECT_EQ(gc.rc, 0) << gc;
  EXPECT_EQ(gc.out, "tenant 'a': 1 dead process reaped\n") << gc;
  EXPECT_EQ(tenant_total("a", 0), 512 * kMiB);
  t = table_status();
  EXPECT_FALSE(contains(t, "dead")) << t;
  EXPECT_EQ(second->ask("reserve 0 " + std::to_string(1536 * kMiB)), "ok");

  // Every tenant.
  b->kill9();
  second->kill9();
  const Result all = slicectl({"gc", "--coordinator", dir_});
  EXPECT_EQ(all.rc, 0) << all;
  EXPECT_EQ(all.out, "tenant 'a': 1 dead process reaped\ntenant 'b': 1 dead process reaped\n") << all;
  EXPECT_EQ(tenant_total("a", 0), 0u);
  EXPECT_EQ(tenant_total("b", 0), 0u);
  const Result again = slicectl({"gc", "--coordinator", dir_});
  EXPECT_EQ(again.out, "tenant 'a': 0 dead processes reaped\ntenant 'b': 0 dead processes reaped\n") << again;

  const Result unknown = slicectl({"gc", "nosuch", "--coordinator", dir_});
  EXPECT_EQ(unknown.rc, 1) << unknown;
  EXPECT_TRUE(contains(unknown.err, "no tenant 'nosuch' at " + dir_)) << unknown;
}

TEST_F(SlicectlTest, UnreadableFilesAreWarningsNotFailures) {
  auto good = holder({"--tenant", "good", "--device", kDeviceA, "--reserve", "0:" + std::to_string(kMiB)});
  std::ofstream(dir_ + "/tenants/broken") << "not a tenant file";
  std::ofstream(dir_ + "/tenants/empty");
  // A policy anyone may write is ignored, and said so.
  mkdir((policy_dir_).c_str(), 0755);
  std::ofstream(policy_dir_ + "/good") << "memory_limit = 1Ki\n";
  chmod((policy_dir_ + "/good").c_str(), 0666);

  const std::string t = table_status();
  EXPECT_TRUE(contains(t, "warning: tenant 'broken' cannot be read")) << t;
  EXPECT_TRUE(contains(t, "warning: tenant 'empty' cannot be read")) << t;
  EXPECT_TRUE(contains(t, "warning: tenant 'good': " + policy_dir_ + "/good is ignored")) << t;
  EXPECT_TRUE(contains(line_starting(t, "  good"), "1.0 MiB")) << t;
  EXPECT_FALSE(contains(line_starting(t, "  good"), "*")) << t;
  const std::string s = json_status();
  EXPECT_TRUE(contains(s, "warning \"tenant 'broken' cannot be read")) << s;
  EXPECT_TRUE(contains(s, std::string("tenant ") + kGpuA + " good normal null 1048576 100 100 false 0")) << s;
}

TEST_F(SlicectlTest, OddBytesInTenantTextStayValidJsonAndOneLine) {
  const std::string device_name = "GPU \"x\" \\ \x01\x1b[31m \xff\xfe \xc3\xa9";  // ends in a valid é
  auto odd = holder({"--tenant", "odd", "--device", "33:" + device_name + ":1073741824", "--comm", "q\"b\\\x01\xff",
                     "--reserve", "0:4096"});
  const std::string s = json_status();
  EXPECT_TRUE(contains(s, "\"GPU \\\"x\\\" \\\\ \\u0001\\u001b[31m \\ufffd\\ufffd \\u00e9\" 1073741824 4096")) << s;
  EXPECT_TRUE(contains(s, " \"q\\\"b\\\\\\u0001\\ufffd\" 4096")) << s;
  const Result table = slicectl({"status", "--coordinator", dir_});
  EXPECT_EQ(table.rc, 0) << table;
  for (const char c : table.out) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << int(c) << "\n" << table;
  EXPECT_TRUE(contains(table.out, "\\x1b[31m")) << table;
}

// Metering: `slicectl usage` (table, --csv, --since) from the usage record a tenant's processes
// keep in its file, still there after they exit; `slicectl rm` never under a live process.
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::istringstream row(line);
  for (std::string c; std::getline(row, c, ',');) cells.push_back(c);
  return cells;
}

TEST_F(SlicectlTest, UsageReportsWhatTenantsUsedAfterTheyExit) {
  const auto started = std::chrono::steady_clock::now();
  auto team = holder({"--tenant", "team-a", "--device", kDeviceA, "--reserve", "0:" + std::to_string(2 * kGiB)});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(team->ask("release 0 " + std::to_string(2 * kGiB)), "ok");
  const double held_at_most = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  team->stop();
  auto idle = holder({"--tenant", "idle", "--device", kDeviceB});

  const Result csv = slicectl({"usage", "--csv", "--coordinator", dir_});
  ASSERT_EQ(csv.rc, 0) << csv;
  const std::vector<std::string> lines = lines_of(csv.out);
  ASSERT_EQ(lines.size(), 3u) << csv;
  EXPECT_EQ(lines[0],
            "tenant,gpu_uuid,gpu_name,from,to,device_seconds,device_hours,memory_gib_hours,"
            "memory_byte_seconds,live_processes");
  const std::vector<std::string> a = csv_cells(line_starting(csv.out, "team-a,"));
  ASSERT_EQ(a.size(), 10u) << csv;
  EXPECT_EQ(a[1], kGpuA);
  EXPECT_EQ(a[2], "Fake GPU A");
  EXPECT_EQ(a[3].size(), 20u) << "an ISO 8601 UTC time: " << a[3];
  EXPECT_EQ(a[3].back(), 'Z');
  const double byte_seconds = std::stod(a[8]);
  // Held 300 ms at least. The reservation and the release are each metered to within a tick of the
  // coarse clock (docs/memory.md#metering), which widens both bounds by a tick.
  const double tick = static_cast<double>(slice::coarse_clock_tick_ns()) / 1e9;
  EXPECT_GE(byte_seconds, 2.0 * kGiB * (0.3 - tick)) << csv;
  EXPECT_LE(byte_seconds, 2.0 * kGiB * (held_at_most + tick)) << csv;
  EXPECT_NEAR(std::stod(a[7]), byte_seconds / kGiB / 3600, 1e-5);
  EXPECT_EQ(a[9], "0") << "its process has exited; its usage stays";
  const std::vector<std::string> b = csv_cells(line_starting(csv.out, "idle,"));
  ASSERT_EQ(b.size(), 10u) << csv;
  EXPECT_EQ(b[8], "0");
  EXPECT_EQ(b[9], "1");

  const Result table = slicectl({"usage", "--coordinator", dir_});
  ASSERT_EQ(table.rc, 0) << table;
  for (const char* s : {"TENANT", "DEVICE-HOURS", "MEMORY-GiB-HOURS", "MEMORY-BYTE-SECONDS", "FROM", kGpuA, "idle"})
    EXPECT_TRUE(contains(table.out, s)) << s << "\n" << table;
  EXPECT_TRUE(contains(line_starting(table.out, "team-a"), a[8])) << table;

  // status --json has the same cumulative figures.
  const std::string s = json_status();
  const std::string usage_line = line_starting(s, std::string("usage ") + kGpuA + " team-a ");
  ASSERT_FALSE(usage_line.empty()) << s;
  std::istringstream fields(usage_line.substr(usage_line.rfind(' ') + 1));
  double json_byte_seconds = 0;
  fields >> json_byte_seconds;
  EXPECT_NEAR(json_byte_seconds, byte_seconds, 1.0);
  EXPECT_TRUE(contains(s, std::string("usage ") + kGpuB + " idle 0.0 0.0\n")) << s;

  // --since: a day back covers its whole record; the last second, within the record's first hour
  // (one sample, at its start), a part of it: usage is taken as spread evenly between samples.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const Result recent = slicectl({"usage", "--csv", "--since", "1s", "--coordinator", dir_});
  ASSERT_EQ(recent.rc, 0) << recent;
  const std::vector<std::string> part = csv_cells(line_starting(recent.out, "team-a,"));
  ASSERT_EQ(part.size(), 10u) << recent;
  EXPECT_LT(std::stod(part[8]), byte_seconds) << recent;
  EXPECT_GE(part[3], a[3]) << "FROM is TIME, not before the record's start";
  const Result day = slicectl({"usage", "--csv", "--since", "24h", "--coordinator", dir_});
  ASSERT_EQ(day.rc, 0) << day;
  EXPECT_EQ(csv_cells(line_starting(day.out, "team-a,"))[8], a[8]) << day;
}

TEST_F(SlicectlTest, UsageOfAKilledProcessStopsAtItsDeath) {
  auto team = holder({"--tenant", "team-a", "--device", kDeviceA, "--reserve", "0:" + std::to_string(kGiB)});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  team->kill9();
  const auto memory = [&] {
    return std::stod(csv_cells(line_starting(slicectl({"usage", "--csv", "--coordinator", dir_}).out, "team-a,"))[8]);
  };
  const double first = memory();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(memory(), first) << "a dead process's memory is not charged after its death";
}

TEST_F(SlicectlTest, UsageSinceErrorsExitTwo) {
  auto team = holder({"--tenant", "team-a", "--device", kDeviceA});
  for (const char* bad : {"yesterday", "2026-13-01", "2026-02-30", "12x", "0h", "3000-01-01"}) {
    const Result r = slicectl({"usage", "--since", bad, "--coordinator", dir_});
    EXPECT_EQ(r.rc, 2) << bad << "\n" << r;
    EXPECT_TRUE(contains(r.err, std::string("--since '") + bad + "' is not valid: ")) << r;
    EXPECT_TRUE(contains(r.err, "example: --since")) << r;
    EXPECT_TRUE(r.out.empty()) << r;
  }
  EXPECT_TRUE(contains(slicectl({"usage", "--since", "3000-01-01", "--coordinator", dir_}).err, "in the future"));
  EXPECT_EQ(slicectl({"usage", "--since", "--coordinator", dir_}).rc, 2) << "--coordinator is taken as the TIME";
  const Result missing = slicectl({"usage", "--coordinator", dir_, "--since"});
  EXPECT_EQ(missing.rc, 2) << missing;
  EXPECT_EQ(slicectl({"usage", "--json", "--coordinator", dir_}).rc, 2);
  for (const char* good : {"90m", "7d", "2020-01-01", "2020-01-01T00:00Z", "2020-01-01T00:00:00UTC"})
    EXPECT_EQ(slicectl({"usage", "--since", good, "--coordinator", dir_}).rc, 0) << good;
  const Result help = slicectl({"usage", "--help"});
  for (const char* s : {"usage: slicectl usage", "--since TIME", "--csv", "one sample per hour", "UTC", "90m"})
    EXPECT_TRUE(contains(help.out, s)) << s << "\n" << help;
  const Result main_help = slicectl({"--help"});
  for (const char* s : {"usage [--since TIME] [--csv]", "rm TENANT [--force]"})
    EXPECT_TRUE(contains(main_help.out, s)) << s << "\n" << main_help;
}

TEST_F(SlicectlTest, RmRefusesLiveTenantsAndRemovesExitedOnes) {
  auto live = holder({"--tenant", "live", "--device", kDeviceA, "--reserve", "0:" + std::to_string(kGiB)});
  for (const std::vector<std::string>& args : {std::vector<std::string>{"rm", "live"}, {"rm", "live", "--force"}}) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--coordinator", dir_});
    const Result r = slicectl(a);
    EXPECT_EQ(r.rc, 1) << r;
    EXPECT_TRUE(contains(r.err, "tenant 'live' has 1 live process (PID " + std::to_string(live->pid()) + ")")) << r;
  }
  EXPECT_EQ(live->ask("reserve 0 1"), "ok") << "the live process keeps its file";
  EXPECT_TRUE(contains(json_status(), " live ")) << "still listed";

  // Its process dead but not reaped: only with --force.
  live->kill9();
  Result r = slicectl({"rm", "live", "--coordinator", dir_});
  EXPECT_EQ(r.rc, 1) << r;
  EXPECT_TRUE(contains(r.err, "1 dead process not yet reaped: add --force")) << r;
  r = slicectl({"rm", "live", "--force", "--coordinator", dir_});
  EXPECT_EQ(r.rc, 0) << r;
  EXPECT_TRUE(contains(r.out, "tenant 'live' removed")) << r;

  auto done = holder({"--tenant", "done", "--device", kDeviceA});
  done->stop();
  r = slicectl({"rm", "done", "--coordinator", dir_});
  EXPECT_EQ(r.rc, 0) << r;
  EXPECT_FALSE(contains(json_status(), " done ")) << "status no longer lists it";
  EXPECT_FALSE(contains(slicectl({"usage", "--csv", "--coordinator", dir_}).out, "done,"));
  struct stat st {};
  EXPECT_NE(stat((dir_ + "/tenants/done").c_str(), &st), 0);

  r = slicectl({"rm", "done", "--coordinator", dir_});
  EXPECT_EQ(r.rc, 1) << r;
  EXPECT_TRUE(contains(r.err, "no tenant 'done'")) << r;
  EXPECT_EQ(slicectl({"rm", "--coordinator", dir_}).rc, 2);
  EXPECT_EQ(slicectl({"rm", "../x", "--coordinator", dir_}).rc, 2);
  EXPECT_EQ(slicectl({"rm", "a", "b", "--coordinator", dir_}).rc, 2);
  const Result help = slicectl({"rm", "--help"});
  for (const char* s : {"usage: slicectl rm TENANT [--force]", "live", "usage record"})
    EXPECT_TRUE(contains(help.out, s)) << s << "\n" << help;
}

}  // namespace
