// The compute scheduler's policy with a fake clock: the rules one by one, the received-time window,
// the estimator, and a simulated time-slicing GPU on which busy tenants submit kernels through the
// policy, where the shares they receive must converge to their targets.
#include "share_policy.h"

#include "compute_board.h"
#include "coordinator_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace slice {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
// Simulated time starts at 0; the monotonic clock of a machine that has been up a while does not.
constexpr std::uint64_t kClockBase = 1000 * 1000 * kMs;

TenantLoad load(std::uint32_t share, std::uint64_t received_ms, bool wants = true, Priority priority = Priority::normal,
                std::uint32_t limit = 100) {
  return TenantLoad{share, limit, priority, received_ms * kMs, wants};
}

TEST(SharePolicy, AloneOrBesideIdleTenantsRuns) {
  const SharePolicy p;
  EXPECT_EQ(p.decide(load(30, 400), {}), Verdict::run);
  const std::vector<TenantLoad> idle = {load(70, 0, false), load(50, 0, false)};
  EXPECT_EQ(p.decide(load(30, 450), idle), Verdict::run);
}

TEST(SharePolicy, TheTenantFurthestBehindItsShareRunsTheOthersWait) {
  const SharePolicy p;
  // 30% share with 150 ms received = 500 ms at 100%; 70% with 280 ms = 400 ms at 100%.
  const std::vector<TenantLoad> b = {load(70, 280)};  // 100 ms apart: past the 20 ms hysteresis
  EXPECT_EQ(p.decide(load(30, 150), b), Verdict::hold_for_share);
  const std::vector<TenantLoad> a = {load(30, 150)};
  EXPECT_EQ(p.decide(load(70, 280), a), Verdict::run);
  // Within the hysteresis, both may run.
  const std::vector<TenantLoad> close = {load(50, 250)};
  EXPECT_EQ(p.decide(load(50, 251), close), Verdict::run);
  EXPECT_EQ(p.decide(load(50, 271), close), Verdict::hold_for_share);
}

TEST(SharePolicy, OneTenantOfAPriorityAtATimeOnTheDevice) {
  const SharePolicy p;
  // Behind its share, but the other still has work on the device: wait for the turn.
  std::vector<TenantLoad> busy = {load(50, 260)};
  busy[0].active = true;
  EXPECT_EQ(p.decide(load(50, 240), busy), Verdict::hold_for_turn);
  TenantLoad me = load(50, 240);
  me.active = true;  // already on the device: go on
  EXPECT_EQ(p.decide(me, busy), Verdict::run);
  // A higher priority does not wait for a lower one's turn.
  EXPECT_EQ(p.decide(load(50, 240, true, Priority::high), busy), Verdict::run);
}

TEST(SharePolicy, LimitHoldsEvenOnAnIdleDevice) {
  const SharePolicy p;  // 500 ms window
  TenantLoad on_device = load(100, 199, true, Priority::normal, 40);
  on_device.active = true;  // on the device: goes on up to its limit (200 ms of 500)...
  EXPECT_EQ(p.decide(on_device, {}), Verdict::run);
  on_device.received_ns = 201 * kMs;
  EXPECT_EQ(p.decide(on_device, {}), Verdict::hold_for_limit);
  // ...off it, starts again only half a hysteresis (10 ms) below.
  EXPECT_EQ(p.decide(load(100, 199, true, Priority::normal, 40), {}), Verdict::hold_for_limit);
  EXPECT_EQ(p.decide(load(100, 189, true, Priority::normal, 40), {}), Verdict::run);
  // A neighbour held by its limit is not waited for.
  const std::vector<TenantLoad> limited = {load(50, 10, true, Priority::normal, 1)};
  EXPECT_EQ(p.decide(load(50, 300), limited), Verdict::run);
}

TEST(SharePolicy, HigherPriorityFirstLowOnlyOnIdleTime) {
  const SharePolicy p;
  const std::vector<TenantLoad> high = {load(10, 400, true, Priority::high)};
  EXPECT_EQ(p.decide(load(90, 0), high), Verdict::hold_for_priority);
  const std::vector<TenantLoad> normal = {load(10, 400)};
  EXPECT_EQ(p.decide(load(90, 0, true, Priority::high), normal), Verdict::run);
  EXPECT_EQ(p.decide(load(90, 0, true, Priority::low), normal), Verdict::hold_for_priority);
  const std::vector<TenantLoad> idle_normal = {load(10, 400, false)};
  EXPECT_EQ(p.decide(load(90, 0, true, Priority::low), idle_normal), Verdict::run);
}

// What the policy is given: a tenant's shared history (compute_board.h), as every process reads it.
TEST(ReceivedOver, InterpolatesOverTheWindowForgetsTheGoneAndNeverOverstatesANewcomer) {
  const std::uint64_t t0 = 1000 * 1000 * kMs;  // the monotonic clock of a machine up for a while
  ReceivedHistory h{};
  EXPECT_EQ(received_over(h, 0, t0, 500 * kMs), 0u);
  // Half the device for 2 s, recorded every 1 ms.
  for (std::uint64_t t = 0; t <= 2000; ++t) record_history(h, t * kMs / 2, t0 + t * kMs);
  EXPECT_NEAR(static_cast<double>(received_over(h, 1000 * kMs, t0 + 2000 * kMs, 500 * kMs)), 250.0 * kMs, 1.0 * kMs);
  EXPECT_NEAR(static_cast<double>(received_over(h, 1000 * kMs, t0 + 2000 * kMs, 100 * kMs)), 50.0 * kMs, 1.0 * kMs);
  // Its processes gone, nothing more is recorded: the window empties as time passes.
  EXPECT_EQ(received_over(h, 1000 * kMs, t0 + 2600 * kMs, 500 * kMs), 0u);
  // A newcomer: only what it received since it started, however long the window.
  ReceivedHistory fresh{};
  record_history(fresh, 0, t0 + 1000 * kMs);
  record_history(fresh, 23 * kMs, t0 + 1050 * kMs);
  EXPECT_EQ(received_over(fresh, 23 * kMs, t0 + 1050 * kMs, 500 * kMs), 23 * kMs);
}

TEST(DeviceTimeEstimator, ItsShareOfTheTimeItHadWork) {
  DeviceTimeEstimator e;
  e.step(0, true, 2);
  e.step(10 * kMs, true, 2);   // 10 ms shared with one other: 5 ms
  e.step(20 * kMs, false, 1);  // idle: nothing
  e.step(30 * kMs, true, 1);   // alone... the step is counted for the state given with it
  EXPECT_EQ(e.received_ns(), 15 * kMs);
  // Idle at the step's start, work from 36 ms on: credited from then (alone: 4 ms).
  e.step(40 * kMs, false, 1, 36 * kMs);
  EXPECT_EQ(e.received_ns(), 19 * kMs);
  // Work that began before the step (an old cycle's start) adds nothing to an idle step.
  e.step(50 * kMs, false, 1, 36 * kMs);
  EXPECT_EQ(e.received_ns(), 19 * kMs);
}

// ---- a simulated GPU: one context at a time, round-robin every time slice among those with work ----

struct SimTenant {
  std::uint32_t share = 100, limit = 100;
  Priority priority = Priority::normal;
  std::uint64_t kernel_ns = kMs;
  bool busy = true;                 // always has another kernel to submit
  std::deque<std::uint64_t> queue;  // remaining ns of each submitted kernel
  std::uint64_t received = 0;       // the truth
  // Its shared history, as libslice keeps it, and the cumulative total last recorded there.
  std::unique_ptr<ReceivedHistory> history = std::make_unique<ReceivedHistory>();
  std::uint64_t recorded = 0;
  std::uint64_t window(std::uint64_t now, std::uint64_t window_ns) const {
    return std::min(received_over(*history, recorded, kClockBase + now, window_ns), window_ns);
  }
  DeviceTimeEstimator estimate;
  bool held = false;
};

// Runs `seconds` of simulated time; returns each tenant's share of the device over the last
// `measure_s` seconds (from the simulated device's own account, the truth). `use_estimate`: the
// policy sees each tenant's estimator instead of the truth, as libslice does.
std::vector<double> simulate(std::vector<SimTenant>& tenants, double seconds, double measure_s,
                             bool use_estimate = true, std::uint64_t slice_ns = 2 * kMs) {
  const SharePolicy policy;
  const std::uint64_t step = 50'000;  // 50 µs: the watcher's polling interval
  const std::uint64_t end = static_cast<std::uint64_t>(seconds * 1e9);
  const std::uint64_t measure_from = end - static_cast<std::uint64_t>(measure_s * 1e9);
  std::vector<std::uint64_t> at_measure(tenants.size());
  std::size_t running = 0;
  std::uint64_t slice_left = slice_ns;
  for (std::uint64_t now = 0; now < end; now += step) {
    if (now == measure_from)
      for (std::size_t i = 0; i < tenants.size(); ++i) at_measure[i] = tenants[i].received;
    // Each busy tenant keeps two kernels queued, if the policy lets it submit.
    for (std::size_t i = 0; i < tenants.size(); ++i) {
      SimTenant& t = tenants[i];
      if (!t.busy || t.queue.size() >= 2) continue;
      std::vector<TenantLoad> others;
      for (std::size_t j = 0; j < tenants.size(); ++j) {
        if (j == i) continue;
        const SimTenant& o = tenants[j];
        others.push_back({o.share, o.limit, o.priority, o.window(now, policy.window_ns), !o.queue.empty() || o.held,
                          !o.queue.empty()});
      }
      const TenantLoad me{t.share, t.limit, t.priority, t.window(now, policy.window_ns), true, !t.queue.empty()};
      t.held = policy.decide(me, others) != Verdict::run;
      if (!t.held) t.queue.push_back(t.kernel_ns);
    }
    // The device runs one tenant's head kernel for this step, switching every time slice.
    unsigned active = 0;
    std::vector<bool> had_work(tenants.size());
    for (std::size_t i = 0; i < tenants.size(); ++i) active += (had_work[i] = !tenants[i].queue.empty());
    if (active != 0) {
      if (tenants[running].queue.empty() || slice_left == 0) {
        for (std::size_t k = 1; k <= tenants.size(); ++k) {
          const std::size_t next = (running + k) % tenants.size();
          if (!tenants[next].queue.empty()) {
            running = next;
            break;
          }
        }
        slice_left = slice_ns;
      }
      SimTenant& r = tenants[running];
      const std::uint64_t run = std::min({step, r.queue.front(), slice_left});
      r.queue.front() -= run;
      r.received += run;
      slice_left -= run;
      if (r.queue.front() == 0) r.queue.pop_front();
    }
    for (std::size_t i = 0; i < tenants.size(); ++i) {
      SimTenant& t = tenants[i];
      t.estimate.step(now + step, had_work[i], active);
      t.recorded = use_estimate ? t.estimate.received_ns() : t.received;
      record_history(*t.history, t.recorded, kClockBase + now + step);
    }
  }
  std::vector<double> shares;
  for (std::size_t i = 0; i < tenants.size(); ++i)
    shares.push_back(static_cast<double>(tenants[i].received - at_measure[i]) / (measure_s * 1e9));
  return shares;
}

std::vector<SimTenant> busy_tenants(std::initializer_list<std::uint32_t> shares, std::uint64_t kernel_ns) {
  std::vector<SimTenant> t;
  for (std::uint32_t s : shares) {
    t.emplace_back();
    t.back().share = s;
    t.back().kernel_ns = kernel_ns;
  }
  return t;
}

class SharesConverge : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(SharesConverge, ThirtySeventy) {
  auto t = busy_tenants({30, 70}, GetParam());
  const auto s = simulate(t, 4, 2);
  EXPECT_NEAR(s[0], 0.30, 0.03);
  EXPECT_NEAR(s[1], 0.70, 0.03);
  EXPECT_GT(s[0] + s[1], 0.97);  // and the device is kept busy
}

TEST_P(SharesConverge, TheEstimateIsTheTruth) {
  // Taking turns, what each tenant believes it received is what the device gave it.
  auto t = busy_tenants({20, 30, 50}, GetParam());
  simulate(t, 3, 1);
  for (const SimTenant& x : t)
    EXPECT_NEAR(static_cast<double>(x.estimate.received_ns()), static_cast<double>(x.received), 0.01 * 3e9);
}

TEST_P(SharesConverge, TwentyThirtyFifty) {
  auto t = busy_tenants({20, 30, 50}, GetParam());
  const auto s = simulate(t, 4, 2);
  EXPECT_NEAR(s[0], 0.20, 0.03);
  EXPECT_NEAR(s[1], 0.30, 0.03);
  EXPECT_NEAR(s[2], 0.50, 0.03);
}

TEST_P(SharesConverge, EightEqual) {
  auto t = busy_tenants({12, 12, 12, 12, 12, 12, 12, 12}, GetParam());
  const auto s = simulate(t, 4, 2);
  for (double x : s) EXPECT_NEAR(x, 0.125, 0.03);
}

TEST_P(SharesConverge, AloneUsesTheWholeDeviceAndALimitHolds) {
  auto alone = busy_tenants({30}, GetParam());
  EXPECT_GT(simulate(alone, 2, 1)[0], 0.97);
  auto limited = busy_tenants({100}, GetParam());
  limited[0].limit = 40;
  EXPECT_NEAR(simulate(limited, 3, 2)[0], 0.40, 0.03);
}

TEST_P(SharesConverge, BesideAnIdleTenantTheBusyOneTakesAll) {
  auto t = busy_tenants({30, 70}, GetParam());
  t[1].busy = false;
  const auto s = simulate(t, 2, 1);
  EXPECT_GT(s[0], 0.97);
}

TEST_P(SharesConverge, HighPriorityGetsWhatItWants) {
  auto t = busy_tenants({10, 90}, GetParam());
  t[0].priority = Priority::high;
  const auto s = simulate(t, 3, 2);
  EXPECT_GT(s[0], 0.95);  // busy and high: it wants the whole device, and gets it
}

INSTANTIATE_TEST_SUITE_P(KernelLengths, SharesConverge, ::testing::Values(100'000, kMs, 10 * kMs),
                         [](const auto& info) { return std::to_string(info.param / 1000) + "us"; });

TEST(SharesConverge, EnforcementOffGivesEqualShares) {
  // The control: without the policy (all shares equal to the time-slicer's), 30/70 tenants get
  // 50/50. A policy that does nothing would pass nothing above.
  auto t = busy_tenants({50, 50}, kMs);
  const auto s = simulate(t, 3, 2);
  EXPECT_NEAR(s[0], 0.5, 0.02);
}

}  // namespace
}  // namespace slice
