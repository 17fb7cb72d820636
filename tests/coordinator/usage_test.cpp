// Metering for chargeback: the accrual arithmetic with injected clock values (units, carries, no
// overflow over years, claims by compare-and-swap), the hourly samples and the lookup of a past
// moment (between samples, before the oldest, after the newest, untrusted samples), the --since
// parser, and a coordinator whose memory held for a measured time accrues about used x time and
// keeps it after the process leaves, until the tenant is removed (never under a live process), and
// a reading that never goes down while the process integrates.
#include <algorithm>
#include <atomic>
#include <random>

#include "test_support.h"
#include "usage_history.h"
#include "usage_meter.h"

namespace slice::test {
namespace {

constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::uint64_t kSecond = 1'000'000'000;
constexpr std::uint64_t kHourMs = 3'600'000;

ByteNs product(std::uint64_t bytes, std::uint64_t ns) { return ByteNs{bytes} * ns; }

TEST(MemoryAccrual, UsedTimesIntervalExactly) {
  MemoryMeter meter{};
  SlotDevice slot{};
  const std::uint64_t t0 = 1000 * kSecond;
  accrue_slot(meter, slot, t0);  // the first claim only starts the clock
  EXPECT_EQ(metered_memory(meter), ByteNs{0});
  slot.used.store(GiB);
  accrue_slot(meter, slot, t0 + 3600 * kSecond);
  EXPECT_TRUE(metered_memory(meter) == product(GiB, 3600 * kSecond));
  EXPECT_DOUBLE_EQ(byte_seconds(metered_memory(meter)), 3600.0 * GiB);
  // Readers add what is not integrated yet, without writing.
  EXPECT_TRUE(pending_memory(slot, t0 + 3601 * kSecond) == product(GiB, kSecond));
  EXPECT_TRUE(metered_memory(meter) == product(GiB, 3600 * kSecond));
  // Freed: nothing more accrues.
  slot.used.store(0);
  accrue_slot(meter, slot, t0 + 7200 * kSecond);
  EXPECT_TRUE(metered_memory(meter) == product(GiB, 3600 * kSecond));
}

TEST(MemoryAccrual, YearsAtHundredsOfGiBDoNotOverflow) {
  MemoryMeter meter{};
  SlotDevice slot{};
  const std::uint64_t year = 365ull * 86400 * kSecond;
  accrue_slot(meter, slot, 1);
  slot.used.store(256 * GiB);
  ByteNs expected = 0;
  for (int y = 1; y <= 20; ++y) {  // twenty years, a change each year
    accrue_slot(meter, slot, 1 + y * year);
    expected += product(256 * GiB, year);
  }
  EXPECT_TRUE(metered_memory(meter) == expected);
  // Plain byte-seconds in 64 bits would have wrapped (20 years x 256 GiB = 1.7e20 > 1.8e19).
  EXPECT_GT(byte_seconds(expected), 1.8e19);
  EXPECT_NEAR(byte_seconds(metered_memory(meter)), 20.0 * 365 * 86400 * 256 * GiB, 1e6);
}

TEST(MemoryAccrual, FractionsCarryExactlyOnce) {
  MemoryMeter meter{};
  const ByteNs unit = ByteNs{1} << kMemoryUnitShift;
  add_memory(meter, unit - 1);
  EXPECT_EQ(meter.units.load(), 0u);
  add_memory(meter, 1);
  EXPECT_EQ(meter.units.load(), 1u);
  EXPECT_TRUE(metered_memory(meter) == unit);
  // Many odd amounts, some over a unit: the sum is exact, the free-running fraction wrapping too.
  std::mt19937_64 random(7);
  ByteNs sum = unit;
  for (int i = 0; i < 200'000; ++i) {
    const ByteNs amount = (ByteNs{random()} << 8) | (random() & 0xff);
    add_memory(meter, amount);
    sum += amount;
  }
  EXPECT_TRUE(metered_memory(meter) == sum);
}

TEST(MemoryAccrual, ConcurrentAddersLoseNothing) {
  MemoryMeter meter{};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&meter, t] {
      for (int i = 0; i < 50'000; ++i) add_memory(meter, (ByteNs{1} << 39) + 12345 + t);
    });
  for (std::thread& t : threads) t.join();
  ByteNs expected = 0;
  for (int t = 0; t < 4; ++t) expected += ((ByteNs{1} << 39) + 12345 + t) * 50'000;
  EXPECT_TRUE(metered_memory(meter) == expected);
}

TEST(MemoryAccrual, AnIntervalIsClaimedOnce) {
  MemoryMeter meter{};
  SlotDevice slot{};
  accrue_slot(meter, slot, 10 * kSecond);
  slot.used.store(1000);
  accrue_slot(meter, slot, 12 * kSecond);
  // A caller whose clock read came before the last claim finds the interval taken.
  accrue_slot(meter, slot, 11 * kSecond);
  EXPECT_TRUE(metered_memory(meter) == product(1000, 2 * kSecond));
  EXPECT_EQ(slot.accrued_ns.load(), 12 * kSecond);
  // A stamp far ahead of the clock was taken before a reboot: counting restarts from now.
  slot.accrued_ns.store(1'000'000 * kSecond);
  accrue_slot(meter, slot, 20 * kSecond);
  EXPECT_EQ(slot.accrued_ns.load(), 20 * kSecond);
  EXPECT_TRUE(metered_memory(meter) == product(1000, 2 * kSecond));
}

// A record with samples taken at the given wall times (ms) with the given counters.
struct Sampled {
  std::unique_ptr<UsageRecord> record = std::make_unique<UsageRecord>();
  bool take(std::uint64_t wall_ms, std::uint64_t device_ns, std::uint64_t memory_units) {
    record->memory.units.store(memory_units);
    return record_usage_sample(*record, device_ns, 1, wall_ms);
  }
};

double units_to_byte_seconds(std::uint64_t units) { return byte_seconds(ByteNs{units} << kMemoryUnitShift); }

TEST(UsageHistory, OneSamplePerHourAndTheLookupOfAPastMoment) {
  const std::uint64_t h0 = 490'000 * kHourMs;  // an hour boundary in 2025
  Sampled s;
  EXPECT_TRUE(s.take(h0 + 10, 0, 0));
  EXPECT_FALSE(s.take(h0 + 1000, 5, 5)) << "the same hour has its sample";
  EXPECT_TRUE(s.take(h0 + kHourMs, 3600 * kSecond, 1000));
  EXPECT_TRUE(s.take(h0 + 3 * kHourMs, 5400 * kSecond, 4000));  // hour 2 had no activity: no sample
  EXPECT_FALSE(s.take(h0 + 2 * kHourMs, 1, 1)) << "a clock set back waits";
  EXPECT_EQ(s.record->first_wall_ms.load(), h0 + 10);

  const UsagePoint now{h0 + 4 * kHourMs, 9000 * kSecond, units_to_byte_seconds(8000)};
  const std::vector<UsagePoint> samples = usage_samples(*s.record, now);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].wall_ms, h0 + 10);
  EXPECT_EQ(samples[2].device_ns, 5400 * kSecond);

  // Between two samples: linear. Half way from hour 1 to hour 3.
  UsagePoint p = usage_at(samples, now, h0 + 2 * kHourMs);
  EXPECT_EQ(p.device_ns, 4500 * kSecond);
  EXPECT_NEAR(p.memory_byte_seconds, units_to_byte_seconds(2500), 1);
  // On a sample: the sample.
  p = usage_at(samples, now, h0 + kHourMs);
  EXPECT_EQ(p.device_ns, 3600 * kSecond);
  // Before the oldest: the oldest.
  p = usage_at(samples, now, h0 - 5 * kHourMs);
  EXPECT_EQ(p.wall_ms, h0 + 10);
  EXPECT_EQ(p.device_ns, 0u);
  // After the newest: toward the totals now (a quarter of the way from hour 3 to hour 4).
  p = usage_at(samples, now, h0 + 3 * kHourMs + kHourMs / 4);
  EXPECT_EQ(p.device_ns, 6300 * kSecond);
  EXPECT_NEAR(p.memory_byte_seconds, units_to_byte_seconds(5000), 1);
  // Now and later: now.
  EXPECT_EQ(usage_at(samples, now, now.wall_ms + 1).device_ns, now.device_ns);
  // No samples: nothing known before now.
  EXPECT_EQ(usage_at({}, now, h0).device_ns, now.device_ns);
}

TEST(UsageHistory, UntrustedSamplesAreLeftOut) {
  const std::uint64_t h0 = 490'000 * kHourMs;
  Sampled s;
  ASSERT_TRUE(s.take(h0, 100, 100));
  ASSERT_TRUE(s.take(h0 + kHourMs, 200, 200));
  ASSERT_TRUE(s.take(h0 + 2 * kHourMs, 50, 300));  // device time went down: not believed
  // One written in a place that is not its hour's, one unfinished (time 0).
  UsageSample& wrong = s.record->samples[(h0 / kHourMs + 5) % kUsageSamples];
  wrong.wall_ms.store(h0 + kHourMs / 2);
  const UsagePoint now{h0 + 3 * kHourMs, 1000, units_to_byte_seconds(1000)};
  std::vector<UsagePoint> samples = usage_samples(*s.record, now);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].device_ns, 200u);
  // A sample above the totals now is left out too.
  samples = usage_samples(*s.record, UsagePoint{now.wall_ms, 150, now.memory_byte_seconds});
  EXPECT_EQ(samples.size(), 1u);
}

TEST(UsageHistory, TheRingKeepsThirtyFiveDays) {
  const std::uint64_t h0 = 490'000 * kHourMs;
  Sampled s;
  ASSERT_TRUE(s.take(h0, 0, 0));
  ASSERT_TRUE(s.take(h0 + kUsageSamples * kHourMs, 10, 10));  // the same place, one round later
  ASSERT_TRUE(s.take(h0 + (kUsageSamples + 1) * kHourMs, 20, 20));
  const UsagePoint now{h0 + (kUsageSamples + 2) * kHourMs, 30, units_to_byte_seconds(30)};
  const std::vector<UsagePoint> samples = usage_samples(*s.record, now);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples.front().wall_ms, h0 + kUsageSamples * kHourMs);
}

using Metering = CoordinatorTest;

const TenantGpuView* gpu_of(const std::vector<TenantView>& views, const std::string& tenant) {
  const TenantView* t = find_tenant(views, tenant);
  return t && t->gpus.size() == 1 ? &t->gpus[0] : nullptr;
}

TEST_F(Metering, MemoryHeldAccruesUsedTimesTimeAndStaysAfterTheProcessLeaves) {
  using Clock = std::chrono::steady_clock;
  auto c = join("billing", std::nullopt);
  ASSERT_NE(c, nullptr);
  const auto before_reserve = Clock::now();
  ASSERT_TRUE(c->reserve(0, 2 * GiB));
  const auto reserved = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string error;
  // While held, a reader sees it grow without anyone writing.
  const TenantGpuView* held = gpu_of(read_coordinator(dir_, policy_dir_, error), "billing");
  ASSERT_NE(held, nullptr) << error;
  EXPECT_GE(held->memory_byte_seconds_total, 2.0 * GiB * 0.3);
  const auto releasing = Clock::now();
  c->release(0, 2 * GiB);
  const auto released = Clock::now();
  // A change is metered at the coarse clock (usage_meter.h): as made up to one tick before it was,
  // so the reservation's and the release's times are each known to within a tick.
  const double tick = static_cast<double>(coarse_clock_tick_ns()) / 1e9;
  const double at_least = 2.0 * GiB * (std::chrono::duration<double>(releasing - reserved).count() - tick);
  const double at_most = 2.0 * GiB * (std::chrono::duration<double>(released - before_reserve).count() + tick);
  c.reset();  // the process leaves

  const std::vector<TenantView> views = read_coordinator(dir_, policy_dir_, error);
  const TenantGpuView* g = gpu_of(views, "billing");
  ASSERT_NE(g, nullptr) << error;
  EXPECT_TRUE(find_tenant(views, "billing")->processes.empty());
  EXPECT_GE(g->memory_byte_seconds_total, at_least);
  EXPECT_LE(g->memory_byte_seconds_total, at_most);
  EXPECT_GT(g->usage_started_ms, 0u);
  EXPECT_FALSE(g->usage_samples.empty()) << "the first change takes the first hour's sample";
  // Nobody holds anything: it stays as it is.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const TenantGpuView* later = gpu_of(read_coordinator(dir_, policy_dir_, error), "billing");
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(later->memory_byte_seconds_total, g->memory_byte_seconds_total);

  // A new process of the tenant continues the same record.
  auto again = join("billing", std::nullopt);
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(again->reserve(0, GiB));
  again->release(0, GiB);
  EXPECT_GE(gpu_of(read_coordinator(dir_, policy_dir_, error), "billing")->memory_byte_seconds_total,
            g->memory_byte_seconds_total);
  again.reset();

  // Removed: the record goes with the file, and the tenant starts from nothing next time.
  ASSERT_TRUE(remove_tenant(dir_, "billing", false, error)) << error;
  EXPECT_EQ(find_tenant(read_coordinator(dir_, policy_dir_, error), "billing"), nullptr);
  auto fresh = join("billing", std::nullopt);
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(gpu_of(read_coordinator(dir_, policy_dir_, error), "billing")->memory_byte_seconds_total, 0.0);
}

// A reader must never see the total go down (to Prometheus, a counter reset): the process
// integrates its memory (moves its slot's stamp, then adds to the meter) while tools read the file.
// The CI run that failed read the meter before an integration and the stamp after it: a second of
// the tenant's memory missing from `slicectl usage`, and back in the next reading.
TEST_F(Metering, AReadingNeverGoesDownWhileTheProcessIntegrates) {
  using Clock = std::chrono::steady_clock;
  auto c = join("steady", std::nullopt);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->reserve(0, GiB));
  std::atomic<bool> stop{false};
  // Each change integrates what was held since the last one (once per tick of the coarse clock).
  std::thread changes([&] {
    while (!stop.load()) {
      if (c->reserve(0, 4096)) c->release(0, 4096);
    }
  });
  std::string error;
  double last = 0;
  int readings = 0, lower = 0;
  std::string first_drop;
  const auto until = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < until) {
    const TenantGpuView* g = gpu_of(read_coordinator(dir_, policy_dir_, error), "steady");
    ASSERT_NE(g, nullptr) << error;
    ++readings;
    if (g->memory_byte_seconds_total < last) {
      if (lower++ == 0)
        first_drop = std::to_string(last / GiB) + " GiB-s, then " + std::to_string(g->memory_byte_seconds_total / GiB);
    }
    last = std::max(last, g->memory_byte_seconds_total);
  }
  stop.store(true);
  changes.join();
  c->release(0, GiB);
  EXPECT_GT(readings, 100);
  EXPECT_EQ(lower, 0) << lower << " of " << readings << " readings went down, first: " << first_drop;
}

TEST_F(Metering, RemoveNeverPullsTheFileFromUnderALiveProcess) {
  auto c = join("busy", std::nullopt);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->reserve(0, GiB));
  std::string error;
  for (bool force : {false, true}) {
    EXPECT_FALSE(remove_tenant(dir_, "busy", force, error));
    EXPECT_NE(error.find("1 live process"), std::string::npos) << error;
  }
  struct stat st {};
  EXPECT_EQ(stat(tenant_path("busy").c_str(), &st), 0);
  // The process still meters into the file it uses.
  c->release(0, GiB);
  c.reset();
  EXPECT_TRUE(remove_tenant(dir_, "busy", false, error)) << error;
  EXPECT_NE(stat(tenant_path("busy").c_str(), &st), 0);
}

}  // namespace
}  // namespace slice::test
