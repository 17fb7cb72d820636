// The compute board, as another tenant's scheduler sees a tenant: that a tenant which just joined a
// GPU is visible with its priority before it has run anything (a high-priority server's first
// requests must not wait behind deep queues), and drops out as dormant once the window passed; that a
// waiter sleeping on a tenant's word (wait_for) is woken by its change of turns, at once when its row
// is already out of date, and otherwise only at its timeout or by interrupt(); and that a tenant file
// made anew under the same name is read, not the removed one; that a resting tenant is read again
// when it rings the bell, and not at every look before.
#include "compute_board.h"

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "awake_bell.h"
#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t kWindowNs = 500'000'000;

class ComputeBoardTest : public CoordinatorTest {
 protected:
  std::unique_ptr<Coordinator> join(const std::string& tenant, Priority priority) {
    JoinRequest r;
    r.dir = dir_;
    r.tenant = tenant;
    r.devices = {fake_gpu(0)};
    r.priority = priority;
    std::string error;
    std::vector<std::string> warnings;
    auto c = Coordinator::join(r, error, warnings);
    EXPECT_NE(c, nullptr) << error;
    return c;
  }
  std::vector<TenantCompute> look(ComputeBoard& board, std::uint64_t now_ns) {
    std::vector<TenantCompute> out;
    board.read(fake_gpu_uuid(0).data(), now_ns, kWindowNs, out);
    return out;
  }
  // A tenant with work on the GPU, and another's board with that tenant's row as read now.
  struct Pair {
    std::unique_ptr<Coordinator> holder, waiter;
    std::unique_ptr<ComputeBoard> board;
    std::vector<TenantCompute> seen;
  };
  Pair holder_and_waiter();
};

// The tenant has work on the GPU, as its watcher publishes it.
void publish_active(Coordinator& c, bool active, std::uint64_t at_ns = monotonic_ns()) {
  c.device_entry(0).active_heartbeat_ns.store(at_ns);
  c.publish_compute(0, active ? kSlotActive : 0, true);
}

ComputeBoardTest::Pair ComputeBoardTest::holder_and_waiter() {
  Pair p;
  p.holder = join("holder", Priority::normal);
  p.waiter = join("waiter", Priority::normal);
  publish_active(*p.holder, true);
  p.board = std::make_unique<ComputeBoard>(dir_, "waiter");
  p.seen = look(*p.board, monotonic_ns());
  EXPECT_EQ(p.seen.size(), 1u);
  EXPECT_TRUE(!p.seen.empty() && p.seen[0].active);
  return p;
}

TEST_F(ComputeBoardTest, ANewcomerIsSeenWithItsPriorityBeforeItRunsAnything) {
  auto batch = join("batch", Priority::normal);
  auto server = join("server", Priority::high);
  ComputeBoard board(dir_, "batch");
  const std::uint64_t now = monotonic_ns();
  const std::vector<TenantCompute> seen = look(board, now);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].name, "server");
  EXPECT_EQ(seen[0].priority, Priority::high);
  EXPECT_FALSE(seen[0].active);
  EXPECT_EQ(seen[0].window_received_ns, 0u);
  EXPECT_TRUE(joined_within(seen[0], now, kWindowNs));
  // A window later, with nothing run, it is dormant: the others no longer make room for it.
  const std::uint64_t later = now + kWindowNs + 10'000'000;
  EXPECT_FALSE(joined_within(seen[0], later, kWindowNs));
  ComputeBoard fresh_board(dir_, "batch");
  EXPECT_TRUE(look(fresh_board, later).empty());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_F(ComputeBoardTest, AWaiterSleepsUntilTheHolderStopsWantingTheDevice) {
  Pair p = holder_and_waiter();
  ASSERT_EQ(p.seen.size(), 1u);
  ComputeBoard& board = *p.board;
  const std::vector<TenantCompute>& seen = p.seen;
  const auto t0 = std::chrono::steady_clock::now();
  auto wait = std::async(std::launch::async, [&] { return board.wait_for(seen[0], 5'000'000'000); });
  // Asleep while nothing changes ...
  EXPECT_EQ(wait.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  // ... and woken by the holder's change, long before its timeout.
  publish_active(*p.holder, false);
  ASSERT_EQ(wait.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_EQ(wait.get(), WaitResult::changed);
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST_F(ComputeBoardTest, AWaitOnARowAlreadyOutOfDateEndsAtOnce) {
  Pair p = holder_and_waiter();
  ASSERT_EQ(p.seen.size(), 1u);
  ComputeBoard& board = *p.board;
  const std::vector<TenantCompute>& seen = p.seen;
  publish_active(*p.holder, false);  // between the read and the wait: the wake-up is not lost
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(board.wait_for(seen[0], 5'000'000'000), WaitResult::changed);
  EXPECT_LT(seconds_since(t0), 1.0);
}

TEST_F(ComputeBoardTest, AWaitWithNothingChangingEndsAtItsTimeoutOrWhenInterrupted) {
  Pair p = holder_and_waiter();
  ASSERT_EQ(p.seen.size(), 1u);
  ComputeBoard& board = *p.board;
  const std::vector<TenantCompute>& seen = p.seen;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(board.wait_for(seen[0], 50'000'000), WaitResult::timed_out);
  EXPECT_GE(seconds_since(t0), 0.045);
  // The holder's heartbeat kept fresh, as its watcher keeps it (a stale one would be a change).
  p.holder->device_entry(0).active_heartbeat_ns.store(monotonic_ns());
  t0 = std::chrono::steady_clock::now();
  auto wait = std::async(std::launch::async, [&] { return board.wait_for(seen[0], 5'000'000'000); });
  EXPECT_EQ(wait.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  for (int i = 0; i < 100 && wait.wait_for(std::chrono::milliseconds(10)) == std::future_status::timeout; ++i)
    board.interrupt();  // as Compute::stop() does (repeated: the wait may not have begun yet)
  ASSERT_EQ(wait.wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_LT(seconds_since(t0), 2.0);
}

TEST_F(ComputeBoardTest, ACountWhoseHeartbeatIsStaleDoesNotEndAWait) {
  auto holder = join("holder", Priority::normal);
  auto waiter = join("waiter", Priority::normal);
  DeviceEntry& entry = holder->device_entry(0);
  entry.active_heartbeat_ns.store(monotonic_ns());
  entry.wanting_heartbeat_ns.store(0);  // a wanting count nobody confirms any more: not wanting
  holder->publish_compute(0, kSlotActive | kSlotWanting, true);
  ComputeBoard board(dir_, "waiter");
  const std::vector<TenantCompute> seen = look(board, monotonic_ns());
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_TRUE(seen[0].active);
  ASSERT_FALSE(seen[0].wanting);
  // Read as the row was read, nothing changed: the wait sleeps (a waiter that woke at once here
  // would spin for as long as the count stays).
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(board.wait_for(seen[0], 100'000'000), WaitResult::timed_out);
  EXPECT_GE(seconds_since(t0), 0.09);
}

TEST_F(ComputeBoardTest, ALeavingProcessTakesBothItsFlagsOffTheBoard) {
  auto holder = join("holder", Priority::normal);
  auto waiter = join("waiter", Priority::normal);
  DeviceEntry& entry = holder->device_entry(0);
  entry.active_heartbeat_ns.store(monotonic_ns());
  entry.wanting_heartbeat_ns.store(monotonic_ns());
  holder->publish_compute(0, kSlotActive | kSlotWanting, true);  // work queued, and threads held
  ComputeBoard board(dir_, "waiter");
  std::vector<TenantCompute> seen = look(board, monotonic_ns());
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_TRUE(seen[0].active && seen[0].wanting);
  holder->leave();  // its last process exits: the tenant neither has nor wants the device any more
  EXPECT_EQ(entry.active_processes.load(), 0u);
  EXPECT_EQ(entry.wanting_processes.load(), 0u);
  for (const TenantCompute& t : look(board, monotonic_ns())) EXPECT_FALSE(t.active || t.wanting) << t.name;
}

TEST_F(ComputeBoardTest, ATenantFileMadeAnewUnderItsNameIsTheOneRead) {
  auto waiter = join("waiter", Priority::normal);
  auto server = join("server", Priority::normal);
  ComputeBoard board(dir_, "waiter");
  std::uint64_t now = monotonic_ns();
  std::vector<TenantCompute> seen = look(board, now);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].priority, Priority::normal);
  // slicectl rm, then a new process of the tenant: a new file under the same name.
  server.reset();
  ASSERT_TRUE(std::filesystem::remove(tenant_path("server")));
  auto again = join("server", Priority::high);
  publish_active(*again, true);
  now = monotonic_ns() + 200'000'000;  // past the board's next look at the folder
  seen = look(board, now);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].priority, Priority::high);  // the removed file said normal
}

// A tenant that rests (joined, nothing run for a window) is not read at every look: that is what
// keeps a look's cost flat with hundreds of tenants. When it starts work it rings the bell
// (awake_bell.h), and is read at the next look.
TEST_F(ComputeBoardTest, ARestingTenantIsReadAgainWhenItRingsTheBell) {
  auto reader = join("reader", Priority::normal);
  auto sleeper = join("sleeper", Priority::normal);
  ComputeBoard board(dir_, "reader");
  std::uint64_t now = monotonic_ns() + kWindowNs + 10'000'000;  // its join is a window old: it rests
  EXPECT_TRUE(look(board, now).empty());
  // Past the clock tick of the folders' last changes (the joins ring too): the first look after
  // that still takes them for new (a change in the same tick could hide behind them), not the next.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  now += 20'000'000;
  EXPECT_TRUE(look(board, now).empty());
  // Past several looks, and past the 50 ms rest of a coordinator without a bell: work, but no ring.
  now += 60'000'000;
  publish_active(*sleeper, true, now);
  EXPECT_TRUE(look(board, now).empty()) << "a resting tenant was read although nobody rang";
  ASSERT_TRUE(ring_awake_bell(dir_));
  now += 20'000'000;  // the next look at the folders
  publish_active(*sleeper, true, now);
  const std::vector<TenantCompute> seen = look(board, now);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].name, "sleeper");
  EXPECT_TRUE(seen[0].active);
  EXPECT_TRUE(std::filesystem::is_empty(std::filesystem::path(dir_) / kAwakeFolder)) << "the ring left a file";
  EXPECT_TRUE(bell_trusted(dir_));
}

// A coordinator folder without the bell's folder (made by an older libslice, or where it could not
// be made): resting tenants are read again every 50 ms, as before the bell.
TEST_F(ComputeBoardTest, WithoutTheBellsFolderARestingTenantIsReadWithin50Ms) {
  auto reader = join("reader", Priority::normal);
  auto sleeper = join("sleeper", Priority::normal);
  ASSERT_TRUE(std::filesystem::remove(std::filesystem::path(dir_) / kAwakeFolder));
  ComputeBoard board(dir_, "reader");
  std::uint64_t now = monotonic_ns() + kWindowNs + 10'000'000;
  EXPECT_TRUE(look(board, now).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(ring_awake_bell(dir_));
  now += 60'000'000;
  publish_active(*sleeper, true, now);
  const std::vector<TenantCompute> seen = look(board, now);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].active);
}

// A bell's folder that anyone could have made private (not shared and sticky) is not trusted: a
// tenant that could no longer ring would otherwise rest a second for every reader.
TEST_F(ComputeBoardTest, ABellsFolderNotSharedIsNotTrusted) {
  auto reader = join("reader", Priority::normal);
  auto sleeper = join("sleeper", Priority::normal);
  const std::filesystem::path bell = std::filesystem::path(dir_) / kAwakeFolder;
  ASSERT_TRUE(bell_trusted(dir_));
  std::filesystem::permissions(bell, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                         std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                         std::filesystem::perms::others_exec);
  EXPECT_FALSE(bell_trusted(dir_));
  ComputeBoard board(dir_, "reader");
  std::uint64_t now = monotonic_ns() + kWindowNs + 10'000'000;
  EXPECT_TRUE(look(board, now).empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  now += 20'000'000;
  EXPECT_TRUE(look(board, now).empty());  // the first look a tick after the joins' rings
  now += 60'000'000;
  publish_active(*sleeper, true, now);
  const std::vector<TenantCompute> seen = look(board, now);
  ASSERT_EQ(seen.size(), 1u) << "read again within 50 ms, as without a bell";
}

// What a process believes of another tenant (issue 29): its own user's and root's alone as written;
// a group's tenant high only by the administrator's word; another user's never above low.
TEST(TenantTrust, WhatAnotherTenantsFileCanClaim) {
  const uid_t me = 1000;
  EXPECT_EQ(trust_of(1000, 0644, me), TenantTrust::believed);
  EXPECT_EQ(trust_of(0, 0644, me), TenantTrust::believed);
  EXPECT_EQ(trust_of(0, 0664, me), TenantTrust::managed_by_a_group);
  EXPECT_EQ(trust_of(1001, 0644, me), TenantTrust::stranger);
  EXPECT_EQ(trust_of(1001, 0644, 0), TenantTrust::stranger) << "root believes no user's claims either";
  struct Case {
    TenantTrust trust;
    PolicyCompute policy;
    Priority claimed, believed;
    const char* why;
  };
  const Case cases[] = {
      {TenantTrust::believed, {}, Priority::high, Priority::high, "its own user's, or root's alone"},
      {TenantTrust::managed_by_a_group, {}, Priority::high, Priority::normal, "a group's, no policy's"},
      {TenantTrust::managed_by_a_group, {Priority::high, {}, {}}, Priority::high, Priority::high, "the policy's"},
      {TenantTrust::managed_by_a_group, {Priority::high, {}, {}}, Priority::low, Priority::low, "it may ask less"},
      {TenantTrust::managed_by_a_group, {Priority::low, {}, {}}, Priority::normal, Priority::low, "policy: low"},
      {TenantTrust::stranger, {}, Priority::normal, Priority::low, "another user's"},
  };
  for (const Case& c : cases) {
    TenantCompute t;
    t.priority = c.claimed;
    apply_trust(c.trust, c.policy, t);
    EXPECT_EQ(t.priority, c.believed) << c.why;
  }
  // Another user's tenant never holds anyone back, a low tenant included: it has no work, wants none.
  TenantCompute busy;
  busy.active = busy.wanting = true;
  apply_trust(TenantTrust::stranger, {}, busy);
  EXPECT_FALSE(busy.active || busy.wanting);
  // A group's tenant gets no more share or limit than its policy sets.
  TenantCompute greedy;
  greedy.share = greedy.limit = 100;
  apply_trust(TenantTrust::managed_by_a_group, {std::nullopt, 20u, 50u}, greedy);
  EXPECT_EQ(greedy.share, 20u);
  EXPECT_EQ(greedy.limit, 50u);
}

}  // namespace
}  // namespace slice::test
