// Truncated, foreign and corrupted tenant files. A reader (the tools' read_coordinator) reports them
// and never crashes or hangs; a writer rebuilds one that no live process uses and refuses, with a
// clear error, one that a live process still uses. A tenant may scribble over its own file's slots
// and device entries: readers must survive that too (every index bounded).
#include <functional>
#include <random>

#include <fstream>

#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

class TenantFiles : public CoordinatorTest {
 protected:
  // A valid file of tenant `name` with no live process.
  void make_tenant(const std::string& name) {
    auto c = join(name, MemoryLimit::of_bytes(GiB));
    ASSERT_NE(c, nullptr);
  }
  std::string read_bytes(const std::string& tenant) {
    std::string bytes(sizeof(TenantFile), '\0');
    int fd = open(tenant_path(tenant).c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_EQ(pread(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    close(fd);
    return bytes;
  }
  void write_bytes(const std::string& tenant, const void* data, std::size_t size, off_t at) {
    int fd = open(tenant_path(tenant).c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, data, size, at), static_cast<ssize_t>(size));
    close(fd);
  }
  // What the tools report about `tenant`.
  TenantView view(const std::string& tenant) {
    std::string error;
    auto views = read_coordinator(dir_, policy_dir_, error);
    EXPECT_TRUE(error.empty()) << error;
    const TenantView* v = find_tenant(views, tenant);
    EXPECT_NE(v, nullptr) << tenant << " is not listed";
    return v ? *v : TenantView{};
  }
  void expect_unreadable(const std::string& tenant, const std::string& problem) {
    const TenantView v = view(tenant);
    EXPECT_FALSE(v.readable);
    EXPECT_NE(v.problem.find(problem), std::string::npos) << v.problem;
    EXPECT_NE(v.problem.find(tenant_path(tenant)), std::string::npos) << v.problem;
  }
  void expect_rebuilt(const std::string& tenant) {
    std::string error;
    auto c = join(tenant, MemoryLimit::of_bytes(512 * MiB), {0}, nullptr, &error);
    ASSERT_NE(c, nullptr) << error;
    EXPECT_EQ(c->cap(0), 512 * MiB) << "a rebuilt tenant is registered afresh";
    EXPECT_TRUE(c->reserve(0, 512 * MiB));
    EXPECT_TRUE(view(tenant).readable);
  }
};

TEST_F(TenantFiles, BrokenFilesAreReportedAndRebuiltWhenUnused) {
  const char* invalid = "not a valid tenant file";
  const std::string t = "t";
  auto resize = [&](off_t size) { return [&, size] { ASSERT_EQ(truncate(tenant_path(t).c_str(), size), 0); }; };
  auto put = [&](auto value, std::size_t at) {
    return [&, value, at] { write_bytes(t, &value, sizeof value, static_cast<off_t>(at)); };
  };
  struct Case {
    const char* what;
    const char* problem;
    std::function<void()> spoil;
  };
  const std::vector<Case> cases = {
      {"truncated", invalid, resize(sizeof(TenantFile) / 2)},
      {"one byte short", invalid, resize(sizeof(TenantFile) - 1)},
      {"longer", invalid, resize(off_t{1} << 30)},
      {"empty", "is empty", resize(0)},
      {"wrong magic", invalid, put(std::uint32_t{0xdeadbeef}, offsetof(TenantHeader, magic))},
      {"newer version", "was made by another libslice version (tenant file version",
       put(std::uint32_t{kTenantVersion + 1}, offsetof(TenantHeader, version))},
      {"wrong size field", invalid, put(std::uint64_t{12}, offsetof(TenantHeader, file_size))},
      {"unterminated name", invalid,
       [&] {
         const std::string n(kTenantNameMax + 1, 'x');
         write_bytes(t, n.data(), n.size(), offsetof(TenantHeader, name));
       }},
      {"another tenant's file", invalid,
       [&] {
         std::filesystem::copy_file(tenant_path("other"), tenant_path(t),
                                    std::filesystem::copy_options::overwrite_existing);
       }},
      {"foreign file", invalid, [&] { write_file(tenant_path(t), "#!/bin/sh\necho not a tenant\n"); }},
  };
  make_tenant("other");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    make_tenant("t");
    c.spoil();
    expect_unreadable("t", c.problem);
    std::string error;
    EXPECT_EQ(reap_tenant(dir_, "t", error), -1);
    EXPECT_NE(error.find(c.problem), std::string::npos) << error;
    EXPECT_TRUE(view("other").readable) << "one broken tenant does not hide the others";
    expect_rebuilt("t");
  }
}

TEST_F(TenantFiles, RandomHeaderDamageNeverCrashesOrHangs) {
  make_tenant("t");
  const std::string pristine = read_bytes("t");
  std::mt19937_64 rng(20240531);
  const std::size_t span = sizeof(TenantHeader) + sizeof(TenantFile::devices);
  int readable = 0, rebuilt_or_joined = 0;
  for (int round = 0; round < 300; ++round) {
    write_bytes("t", pristine.data(), pristine.size(), 0);
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) {
      const std::uint8_t junk = static_cast<std::uint8_t>(rng());
      write_bytes("t", &junk, 1, static_cast<off_t>(rng() % span));
    }
    const TenantView v = view("t");
    readable += v.readable;
    if (!v.readable) {
      EXPECT_FALSE(v.problem.empty());
    }
    EXPECT_LE(v.gpus.size(), static_cast<std::size_t>(kMaxDevices));
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    auto c = join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error);
    if (c) {
      ++rebuilt_or_joined;
      if (c->reserve(0, MiB)) c->release(0, MiB);
    } else {
      EXPECT_FALSE(error.empty());
    }
    c.reset();
    EXPECT_LT(seconds_since(t0), 3.0) << "round " << round;
  }
  std::printf("300 damaged headers: %d still readable, %d joined (rebuilt or as they were)\n", readable,
              rebuilt_or_joined);
}

TEST_F(TenantFiles, ALiveTenantsBrokenFileIsRefusedNotRebuilt) {
  Process& holder = spawn_worker("t", {"--memory", "1Gi"}, {"hold", "1Mi"});
  ASSERT_EQ(holder.read_line(), "ready");
  const std::string pristine = read_bytes("t");

  const std::uint32_t bad = 0x0bad0bad;
  write_bytes("t", &bad, 4, offsetof(TenantHeader, magic));
  expect_unreadable("t", "not a valid tenant file");
  std::string error;
  EXPECT_EQ(join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr);
  EXPECT_NE(error.find("not a valid tenant file"), std::string::npos) << error;
  EXPECT_EQ(reap_tenant(dir_, "t", error), -1);
  // Nothing of it was rebuilt under the live process.
  EXPECT_EQ(read_bytes("t").substr(sizeof bad), pristine.substr(sizeof bad));
  EXPECT_EQ(kill(holder.pid(), 0), 0);

  write_bytes("t", pristine.data(), 4, 0);
  // Another libslice version's file, in use: refused, and told why.
  const std::uint32_t older = kTenantVersion - 1;
  write_bytes("t", &older, 4, offsetof(TenantHeader, version));
  EXPECT_EQ(join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr);
  EXPECT_NE(error.find("another libslice version (tenant file version " + std::to_string(older) + "; this one reads"),
            std::string::npos)
      << error;
  EXPECT_EQ(read_bytes("t").substr(8), pristine.substr(8));
  write_bytes("t", pristine.data() + 4, 4, offsetof(TenantHeader, version));

  auto c = join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error);
  ASSERT_NE(c, nullptr) << error;
  EXPECT_EQ(c->usage(0), MiB);
  c.reset();

  // Truncated under a live process: refused too, and rebuilt once that process is gone.
  ASSERT_EQ(truncate(tenant_path("t").c_str(), 4096), 0);
  EXPECT_EQ(join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr);
  EXPECT_NE(error.find("not a valid tenant file"), std::string::npos) << error;
  expect_unreadable("t", "not a valid tenant file");
  holder.kill(SIGKILL);
  holder.wait();
  expect_rebuilt("t");
}

// Up to version 5 a process held its slot's lock in the tenant file itself (now in its lock file):
// processes of such a libslice, still running after an upgrade, are seen there, and their file is
// not rebuilt under them.
// A process that waited for the registration lock while its files were removed (slicectl rm) or
// replaced (an adoption renames new ones into place) must open the new ones: had it kept the old
// lock file, its slot's lock would be where nobody looks, and it would be taken for dead.
TEST_F(TenantFiles, AHandleWhoseLockFileWasReplacedIsNoLongerLinked) {
  std::string error;
  ASSERT_TRUE(prepare_coordinator_dir(dir_, error)) << error;
  auto h = TenantFileHandle::open(dir_, "t", TenantFileHandle::Mode::create, error);
  ASSERT_NE(h, nullptr) << error;
  EXPECT_TRUE(h->linked());
  const std::string lock = dir_ + "/locks/t";
  { std::ofstream(lock + ".replacement") << ""; }
  ASSERT_EQ(rename((lock + ".replacement").c_str(), lock.c_str()), 0);
  EXPECT_FALSE(h->linked()) << "a handle on a replaced lock file counted as the tenant's";
}

TEST_F(TenantFiles, AnOlderVersionsFileIsNotRebuiltUnderItsProcesses) {
  ASSERT_NE(join("t", MemoryLimit::of_bytes(GiB)), nullptr);  // made, and left
  const std::uint32_t five = 5;
  write_bytes("t", &five, 4, offsetof(TenantHeader, version));
  const int fd = ::open(tenant_path("t").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = kSlotLockBase + 3;  // an older process's slot
  fl.l_len = 1;
  ASSERT_EQ(fcntl(fd, F_OFD_SETLK, &fl), 0);
  std::string error;
  EXPECT_EQ(join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr) << "rebuilt under a running process";
  EXPECT_NE(error.find("its processes still run"), std::string::npos) << error;
  ::close(fd);  // that process is gone: rebuilt
  auto c = join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error);
  EXPECT_NE(c, nullptr) << error;
}

TEST_F(TenantFiles, GarbageInALiveFilesSlotsAndDevicesNeverCrashesReaders) {
  Process& holder = spawn_worker("t", {"--memory", "1Gi"}, {"hold", "1Mi"});
  ASSERT_EQ(holder.read_line(), "ready");
  std::mt19937_64 rng(7);
  const std::size_t body = sizeof(TenantFile) - sizeof(TenantHeader);
  std::vector<std::uint64_t> junk(body / 8 + 1);
  for (int round = 0; round < 60; ++round) {
    // Mostly random words, with some plausible values (states 0-2, small numbers) mixed in.
    for (std::uint64_t& w : junk) w = (rng() % 4 == 0) ? rng() % 3 : rng();
    write_bytes("t", junk.data(), body, sizeof(TenantHeader));
    const TenantView v = view("t");
    ASSERT_TRUE(v.readable) << v.problem;
    EXPECT_LE(v.gpus.size(), static_cast<std::size_t>(kMaxDevices));
    EXPECT_LE(v.processes.size(), static_cast<std::size_t>(kMaxProcesses));
    // Unterminated strings are cut at their fields' ends.
    for (const TenantGpuView& g : v.gpus) EXPECT_LE(g.name.size(), sizeof(DeviceEntry::name));
    for (const ProcessView& p : v.processes) {
      EXPECT_LE(p.comm.size(), sizeof(ProcessSlot::comm));
      EXPECT_EQ(p.memory_used.size(), v.gpus.size());
    }
    if (round % 10 == 0) {
      // A reap and a new process in a scribbled file: bounded waits, no crash.
      const auto t0 = std::chrono::steady_clock::now();
      std::string error;
      reap_tenant(dir_, "t", error);
      auto c = join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error);
      if (c && c->reserve(0, MiB)) c->release(0, MiB);
      c.reset();
      EXPECT_LT(seconds_since(t0), 3.0);
    }
  }
  EXPECT_EQ(kill(holder.pid(), 0), 0);
}

// Run `body` in a child process and fail if it does not finish within `seconds`: a hang must not
// hang the test.
void expect_finishes(const std::function<void()>& body, double seconds, const char* what) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  ASSERT_GT(pid, 0);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (seconds_since(t0) > seconds) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << what << " did not finish within " << seconds << " s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << what << ": status " << status;
}

TEST_F(TenantFiles, NotAFileInPlaceOfATenantIsReportedWithoutHanging) {
  make_tenant("real");
  std::string error;
  ASSERT_TRUE(prepare_coordinator_dir(dir_, error));
  ASSERT_EQ(mkfifo(tenant_path("fifo").c_str(), 0644), 0);
  ASSERT_EQ(symlink(tenant_path("real").c_str(), tenant_path("link").c_str()), 0);
  ASSERT_EQ(mkdir(tenant_path("folder").c_str(), 0755), 0);
  expect_finishes(
      [&] {
        std::string e;
        auto views = read_coordinator(dir_, policy_dir_, e);
        if (views.size() != 4) _exit(2);
        for (const TenantView& v : views)
          if (v.readable != (v.name == "real")) _exit(3);
        for (const char* t : {"fifo", "link", "folder"})
          if (join(t, MemoryLimit::of_bytes(GiB), {0}, nullptr, &e) != nullptr) _exit(4);
        _exit(0);
      },
      5.0, "reading a coordinator with a FIFO, a link and a folder for tenants");
  if (HasFailure()) return;  // it hangs: do not hang here too
  EXPECT_NE(view("fifo").problem.find("not a regular file"), std::string::npos) << view("fifo").problem;
  EXPECT_FALSE(view("link").readable);
  EXPECT_FALSE(view("folder").readable);
  // The link's target is untouched and still valid.
  EXPECT_TRUE(view("real").readable);
}

}  // namespace
}  // namespace slice::test
