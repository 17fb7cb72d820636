// A full table: kMaxProcesses live processes in one tenant, then one more gets a clear error at
// once; after they all die, one reap frees every slot and returns all their memory.
#include <sys/prctl.h>

#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t KiB = 1ull << 10;

using FullTable = CoordinatorTest;

TEST_F(FullTable, EverySlotTakenThenAClearErrorThenOneReapFreesAll) {
  const std::uint64_t cap = kMaxProcesses * 4 * KiB;
  // Forked children of this (single-threaded) test join and pause, which is far lighter than
  // exec'ing a worker each: 1024 processes on two cores.
  std::vector<pid_t> children;
  struct Reaper {
    std::vector<pid_t>& pids;
    ~Reaper() {
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
    }
  } reaper{children};
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kBatch = 64;
  int joined = 0;
  for (int base = 0; base < kMaxProcesses; base += kBatch) {
    for (int i = base; i < base + kBatch && i < kMaxProcesses; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        auto c = join("t", MemoryLimit::of_bytes(cap));
        const char ok = c && c->reserve(0, 4 * KiB) ? 'y' : 'n';
        if (write(ready[1], &ok, 1) != 1) _exit(1);
        for (;;) pause();
      }
      ASSERT_GT(pid, 0) << std::strerror(errno);
      children.push_back(pid);
    }
    for (int i = base; i < base + kBatch && i < kMaxProcesses; ++i) {
      char ok = 0;
      ASSERT_EQ(read(ready[0], &ok, 1), 1);
      joined += ok == 'y';
    }
  }
  close(ready[0]);
  close(ready[1]);
  const double fill = seconds_since(t0);
  ASSERT_EQ(joined, kMaxProcesses);

  std::string error;
  auto views = read_coordinator(dir_, policy_dir_, error);
  ASSERT_EQ(views.size(), 1u) << error;
  EXPECT_EQ(views[0].processes.size(), static_cast<std::size_t>(kMaxProcesses));
  EXPECT_EQ(views[0].gpus[0].used_bytes, cap);

  // One more: a clear error, at once.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(join("t", MemoryLimit::of_bytes(cap), {0}, nullptr, &error), nullptr);
  const double refused = seconds_since(t1);
  EXPECT_NE(error.find("no free process slot"), std::string::npos) << error;
  EXPECT_NE(error.find(std::to_string(kMaxProcesses)), std::string::npos) << error;
  EXPECT_LT(refused, 1.0);
  std::printf("%d processes joined in %.2f s; the next one was refused in %.1f ms: %s\n", kMaxProcesses, fill,
              refused * 1e3, error.c_str());

  // Kill them all. With every slot held by a dead process, one reap still frees them all.
  for (pid_t p : children) kill(p, SIGKILL);
  for (pid_t p : children) waitpid(p, nullptr, 0);
  children.clear();
  TenantWatch watch(dir_, "t");
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ(watch.total(), cap);
  const auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(reap_tenant(dir_, "t", error), kMaxProcesses) << error;
  std::printf("reaping %d dead processes took %.1f ms\n", kMaxProcesses, seconds_since(t2) * 1e3);
  EXPECT_EQ(watch.total(), 0u);
  EXPECT_EQ(watch.live_slots(), 0);
  auto c = join("t", MemoryLimit::of_bytes(cap));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->reserve(0, cap));
}

// Without a reap: a newcomer in a table full of dead processes takes a slot and gets their memory.
TEST_F(FullTable, ANewcomerTakesADeadSlotAndItsMemoryBack) {
  const std::uint64_t cap = 64 * 4 * KiB;
  std::vector<pid_t> children;
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  for (int i = 0; i < 64; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      auto c = join("t", MemoryLimit::of_bytes(cap));
      const char ok = c && c->reserve(0, 4 * KiB) ? 'y' : 'n';
      if (write(ready[1], &ok, 1) != 1) _exit(1);
      for (;;) pause();
    }
    ASSERT_GT(pid, 0);
    children.push_back(pid);
    char ok = 0;
    ASSERT_EQ(read(ready[0], &ok, 1), 1);
    ASSERT_EQ(ok, 'y');
  }
  close(ready[0]);
  close(ready[1]);
  for (pid_t p : children) kill(p, SIGKILL);
  for (pid_t p : children) waitpid(p, nullptr, 0);
  auto c = join("t", MemoryLimit::of_bytes(cap));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->reserve(0, cap));
  std::string error;
  auto views = read_coordinator(dir_, policy_dir_, error);
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].processes.size(), 1u);
  EXPECT_EQ(views[0].dead_processes, 0);
}

using ManyTenants = CoordinatorTest;

TEST_F(ManyTenants, TwoHundredFiftySixTenantsOnOneGpuAreAllSeen) {
  // kMaxTenants tenants on one GPU, each with a process holding some memory under its own cap: every
  // one keeps its own budget, and the tools list them all with the right figures.
  constexpr std::uint64_t MiB = 1ull << 20;
  std::vector<std::unique_ptr<Coordinator>> members;
  for (int t = 0; t < kMaxTenants; ++t) {
    auto c = join("tenant-" + std::to_string(t), MemoryLimit::of_bytes((t % 7 + 1) * MiB));
    ASSERT_NE(c, nullptr) << "tenant " << t;
    ASSERT_TRUE(c->reserve(0, (t % 7 + 1) * MiB)) << "tenant " << t;
    Refusal why;
    EXPECT_FALSE(c->reserve(0, 1, &why)) << "tenant " << t << " passed its own cap";
    members.push_back(std::move(c));
  }
  std::string error;
  const auto views = read_coordinator(dir_, policy_dir_, error);
  ASSERT_EQ(views.size(), static_cast<std::size_t>(kMaxTenants)) << error;
  std::uint64_t sum = 0;
  for (const TenantView& v : views) {
    ASSERT_TRUE(v.readable) << v.name << ": " << v.problem;
    ASSERT_EQ(v.gpus.size(), 1u) << v.name;
    const int t = std::stoi(v.name.substr(std::string("tenant-").size()));
    EXPECT_EQ(v.gpus[0].used_bytes, (t % 7 + 1) * MiB) << v.name;
    EXPECT_EQ(v.gpus[0].cap_bytes, (t % 7 + 1) * MiB) << v.name;
    sum += v.gpus[0].used_bytes;
  }
  std::uint64_t expected = 0;
  for (int t = 0; t < kMaxTenants; ++t) expected += (t % 7 + 1) * MiB;
  EXPECT_EQ(sum, expected);
}

}  // namespace
}  // namespace slice::test
