// What a compute watcher's look at the GPU costs as tenants are added (issue 15): N tenants joined on
// one GPU, two of them busy (one holds the device, one waits), the others idle, as on a shared
// machine where most tenants rest. A "tick" is what the watcher does each time it looks: read the
// other tenants (ComputeBoard::read) and decide (SharePolicy::decide). Ticks are simulated 1 ms apart
// for 10 s of the board's clock, from a window after the joins (the board's full reads of the
// working tenants every 100 ms, and its second-long rereads of the resting ones, included); "after a
// change" is the look right after the holder's state changed (what a hand-over costs the tenant
// next in line). The first look, which reads every tenant once as a watcher's first look does, is
// not counted. Prints figures; asserts nothing. Run through scripts/bench.sh.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compute_board.h"
#include "coordinator.h"
#include "share_policy.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kMs = 1'000'000;

std::uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<std::uint64_t>(ts.tv_nsec);
}

slice::DeviceInfo gpu() {
  slice::DeviceInfo d;
  for (int i = 0; i < 16; ++i) d.uuid[i] = static_cast<std::uint8_t>(0xC0 + i);
  d.name = "bench GPU";
  d.total_bytes = 24ull << 30;
  return d;
}

std::unique_ptr<slice::Coordinator> join(const std::string& dir, const std::string& tenant) {
  slice::JoinRequest r;
  r.dir = dir;
  r.tenant = tenant;
  r.devices.push_back(gpu());
  std::string error;
  std::vector<std::string> warnings;
  auto c = slice::Coordinator::join(r, error, warnings);
  if (!c) {
    std::fprintf(stderr, "board_bench: join failed: %s\n", error.c_str());
    std::exit(1);
  }
  return c;
}

struct Figures {
  double tick_ns;          // mean over the simulated ticks
  double after_change_ns;  // mean of the first look after the holder changed
  double rows;             // tenants the policy saw per tick, mean
};

Figures run(const std::string& root, int tenants) {
  const std::string dir = root + "/n" + std::to_string(tenants);
  std::vector<std::unique_ptr<slice::Coordinator>> members;
  for (int i = 0; i < tenants; ++i) members.push_back(join(dir, "t" + std::to_string(i)));
  // The board's clock runs 1 ms a look, far ahead of the real one: changes to the folders (the joins)
  // must be older than the kernel's clock tick that stamps them, or every look takes them for new.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // t0 watches; t1 holds the device; the others joined and rest.
  // Steady state: the joins a window old, so the resting tenants rest (a tenant that joined within
  // the window is read at every look: a newcomer's first requests must not wait).
  const std::uint64_t start = monotonic_ns() + slice::SharePolicy{}.window_ns + 10 * kMs;
  members[1]->publish_compute(0, slice::kSlotActive, true);
  members[1]->device_entry(0).active_heartbeat_ns.store(start);
  members[0]->publish_compute(0, slice::kSlotWanting, true);
  members[0]->device_entry(0).wanting_heartbeat_ns.store(start);

  slice::ComputeBoard board(dir, "t0");
  slice::SharePolicy policy;
  std::vector<slice::TenantCompute> rows;
  std::vector<slice::TenantLoad> loads;
  const slice::TenantLoad me{50, 100, slice::Priority::normal, 0, true, false};
  double total = 0, seen = 0, after_change = 0;
  int changes = 0;
  const int ticks = 10'000;
  for (int i = 0; i < ticks; ++i) {
    const std::uint64_t now = start + static_cast<std::uint64_t>(i) * kMs;
    slice::DeviceEntry& holder = members[1]->device_entry(0);
    holder.active_heartbeat_ns.store(now);  // the holder keeps its heartbeat fresh, as its watcher does
    const bool change = i % 20 == 0;        // a change of turns every 20 ms
    if (change) holder.received_ns.fetch_add(20 * kMs);
    const auto t0 = Clock::now();
    board.read(gpu().uuid.data(), now, policy.window_ns, rows);
    loads.clear();
    for (const slice::TenantCompute& t : rows)
      loads.push_back({t.share, t.limit, t.priority, t.window_received_ns, t.active || t.wanting, t.active});
    const slice::Verdict v = policy.decide(me, loads);
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    if (v == slice::Verdict::run && rows.empty()) std::exit(4);  // keeps the decision from being optimised out
    if (i == 0) continue;  // the first look reads every tenant once, as a watcher's first does: not a tick
    total += ns;
    seen += static_cast<double>(rows.size());
    if (change) {
      after_change += ns;
      ++changes;
    }
  }
  members.clear();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return {total / (ticks - 1), after_change / changes, seen / (ticks - 1)};
}

}  // namespace

int main() {
  const char* dir = std::getenv("SLICE_COORDINATOR_DIR");
  if (!dir || !*dir) {
    std::fprintf(stderr, "board_bench: set SLICE_COORDINATOR_DIR to a scratch folder (scripts/bench.sh does)\n");
    return 2;
  }
  std::printf("compute watcher's look at the GPU, by tenants joined on it (two busy, the rest idle;\n");
  std::printf("10,000 looks 1 ms apart of the board's clock; host time of read + decide)\n");
  std::printf("  %-8s %12s %18s %14s\n", "tenants", "per look", "after a change", "rows decided");
  for (const int n : {2, 8, 64, 256}) {
    const Figures f = run(dir, n);
    std::printf("  %-8d %9.2f us %15.2f us %14.1f\n", n, f.tick_ns / 1000, f.after_change_ns / 1000, f.rows);
  }
  return 0;
}
