// Many real processes reserving against one tenant's cap at once. The tenant's total is checked
// continuously from outside (a read-only mapping, as a tool sees it) and by every worker after each
// of its reservations: two processes racing must never together pass the cap, and a death that
// several processes notice at once is returned exactly once.
#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;

class Races : public CoordinatorTest {
 protected:
  // Starts `n` workers with --sync and waits until all have joined (or fails).
  std::vector<Process*> start_synced(int n, const std::string& tenant, const std::vector<std::string>& options,
                                     const std::vector<std::string>& command) {
    std::vector<std::string> opts = options;
    opts.push_back("--sync");
    std::vector<Process*> out;
    for (int i = 0; i < n; ++i) out.push_back(&spawn_worker(tenant, opts, command));
    for (Process* p : out) EXPECT_EQ(p->read_line(), "joined");
    return out;
  }
  static void go(const std::vector<Process*>& ps) {
    for (Process* p : ps) p->send_line();
  }
};

TEST_F(Races, ManyProcessesHammeringNeverPassTheCap) {
  constexpr int kWorkers = 8;
  constexpr std::uint64_t size = MiB, cap = 3 * size;  // 8 workers want 8 x size: always contended
  auto workers = start_synced(kWorkers, "t", {"--memory", std::to_string(cap)}, {"hammer", "3", std::to_string(size)});
  ASSERT_FALSE(HasFailure());
  TenantWatch watch(dir_, "t");
  ASSERT_TRUE(watch.ok());
  InvariantMonitor monitor(watch, cap);
  go(workers);
  std::uint64_t ops = 0, refused = 0, violations = 0, max_op_us = 0;
  for (Process* p : workers) {
    const auto line = p->read_line(20'000);
    ASSERT_TRUE(line.has_value()) << "a hammering worker did not finish";
    ops += field(*line, "ops");
    refused += field(*line, "refused");
    violations += field(*line, "violations");
    max_op_us = std::max(max_op_us, field(*line, "max_op_us"));
    EXPECT_EQ(p->wait(), 0);
  }
  monitor.stop();
  std::printf(
      "%d processes, 3 s: %llu reservations, %llu refusals, slowest pair %llu us; "
      "%llu checks from outside, highest total %llu of cap %llu\n",
      kWorkers, (unsigned long long)ops, (unsigned long long)refused, (unsigned long long)max_op_us,
      (unsigned long long)monitor.samples(), (unsigned long long)monitor.max_seen(), (unsigned long long)cap);
  EXPECT_EQ(violations, 0u) << "workers saw the tenant past its cap";
  EXPECT_EQ(monitor.violations(), 0u) << "the tenant was seen past its cap";
  EXPECT_LE(monitor.max_seen(), cap);
  EXPECT_GT(ops, 1000u);
  EXPECT_GT(refused, 0u) << "the cap was never contended";
  EXPECT_GT(monitor.samples(), 1000u);
  // All gone, by the ordinary way out: nothing is left counted, no slot is left taken.
  EXPECT_EQ(watch.total(), 0u);
  EXPECT_EQ(watch.live_slots(), 0);
}

TEST_F(Races, ExactlyAsManyHoldersAsTheCapAllows) {
  constexpr std::uint64_t size = 64 * MiB;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string tenant = "t" + std::to_string(round);
    auto holders = start_synced(8, tenant, {"--memory", std::to_string(3 * size)}, {"hold", std::to_string(size)});
    ASSERT_FALSE(HasFailure());
    go(holders);
    int ready = 0, refused = 0;
    for (Process* p : holders) {
      const auto line = p->read_line();
      ASSERT_TRUE(line.has_value());
      if (*line == "ready")
        ++ready;
      else if (line->rfind("refused", 0) == 0)
        ++refused;
      else
        ADD_FAILURE() << *line;
    }
    EXPECT_EQ(ready, 3);
    EXPECT_EQ(refused, 5);
    TenantWatch watch(dir_, tenant);
    ASSERT_TRUE(watch.ok());
    EXPECT_EQ(watch.total(), 3 * size);
    processes_.clear();
  }
}

// A process holding 2 units dies; four reapers and four would-be holders of 2 units (cap 3 units,
// a survivor holds 1) all notice at once. If the death were returned twice the total would drop
// below the survivor's unit, and two of the would-be holders would get their 2 units.
TEST_F(Races, ADeathNoticedByManyIsReturnedOnce) {
  constexpr std::uint64_t unit = 16 * MiB;
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string tenant = "t" + std::to_string(round);
    const std::vector<std::string> opts = {"--memory", std::to_string(3 * unit)};
    Process& survivor = spawn_worker(tenant, opts, {"hold", std::to_string(unit)});
    ASSERT_EQ(survivor.read_line(), "ready");
    Process& victim = spawn_worker(tenant, opts, {"hold", std::to_string(2 * unit)});
    ASSERT_EQ(victim.read_line(), "ready");
    auto reapers = start_synced(4, tenant, {}, {"reap"});
    auto takers = start_synced(4, tenant, opts, {"hold", std::to_string(2 * unit)});
    ASSERT_FALSE(HasFailure());
    TenantWatch watch(dir_, tenant);
    ASSERT_TRUE(watch.ok());
    EXPECT_EQ(watch.total(), 3 * unit);

    victim.kill(SIGKILL);
    victim.wait();
    InvariantMonitor monitor(watch, 3 * unit);
    go(reapers);
    go(takers);
    int reaped = 0, took = 0;
    for (Process* p : reapers) {
      const auto line = p->read_line();
      ASSERT_TRUE(line.has_value());
      if (line->rfind("reaped ", 0) == 0) reaped += std::atoi(line->c_str() + 7);
    }
    for (Process* p : takers) {
      const auto line = p->read_line();
      ASSERT_TRUE(line.has_value());
      took += *line == "ready";
    }
    monitor.stop();
    EXPECT_LE(reaped, 1) << "the dead slot was freed by more than one";
    EXPECT_EQ(took, 1) << "exactly one can take the 2 units the dead process left";
    EXPECT_GE(monitor.min_seen(), unit) << "the total fell below what the survivor holds";
    EXPECT_EQ(monitor.violations(), 0u);
    EXPECT_EQ(watch.total(), 3 * unit);
    EXPECT_EQ(watch.live_sum(), 3 * unit);
    processes_.clear();
  }
}

}  // namespace
}  // namespace slice::test
