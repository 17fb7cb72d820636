// The compute board, as another tenant's scheduler sees a tenant: here, that a tenant which just
// joined a GPU is visible with its priority before it has run anything (a high-priority server's
// first requests must not wait behind deep queues), and drops out as dormant once the window passed.
#include "compute_board.h"

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
};

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

}  // namespace
}  // namespace slice::test
