// Unprivileged tenants (setpriv to other users, as root): a tenant cannot raise the cap that root's
// policy set, cannot write policy at all, and cannot write, free or delete another user's tenant.
#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr int kUserA = 1000, kUserB = 1001;

class Unprivileged : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    if (!can_switch_user()) GTEST_SKIP() << "needs root and setpriv to run workers as other users";
    // The test's temporary folders are root's and private: open them (only them) to other users.
    chmod(root_.c_str(), 0755);
    if (const char* base = std::getenv("SLICE_TEST_TMPDIR")) chmod(base, 0755);
    std::string error;
    ASSERT_TRUE(prepare_coordinator_dir(dir_, error)) << error;
    if (shell_as(kUserA, "test -x " + dir_ + "/tenants && test -x " + worker_path()) != 0)
      GTEST_SKIP() << "user " << kUserA << " cannot reach " << dir_ << " or the worker";
  }
  Process& spawn_as(int uid, const std::string& tenant, const std::vector<std::string>& options,
                    const std::vector<std::string>& command) {
    return spawn(as_user(uid, worker(dir_, tenant, options, command)));
  }
  int shell_as(int uid, const std::string& script) { return run_command(as_user(uid, {"/bin/sh", "-c", script})); }
};

TEST_F(Unprivileged, AManagedTenantCannotJoinUntilRootMadeItsFile) {
  Policy p;
  p.memory = MemoryLimit::of_bytes(64 * MiB);
  std::string error;
  ASSERT_TRUE(write_policy(policy_dir_, "t", p, error)) << error;
  // Its processes may not create the file themselves: they could delete it again.
  Process& early = spawn_as(kUserA, "t", {}, {"join"});
  const auto line = early.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("managed by an administrator"), std::string::npos) << *line;
  EXPECT_FALSE(std::filesystem::exists(tenant_path("t")));
  ASSERT_TRUE(adopt_tenant_file(dir_, "t", kUserA, error)) << error;
  Process& later = spawn_as(kUserA, "t", {}, {"reserve-once", "64Mi"});
  EXPECT_EQ(later.read_line(), "ok");
}

TEST_F(Unprivileged, ATenantCannotRaiseItsPolicyCap) {
  Policy p;
  p.memory = MemoryLimit::of_bytes(64 * MiB);
  std::string error;
  ASSERT_TRUE(write_policy(policy_dir_, "t", p, error)) << error;
  ASSERT_TRUE(adopt_tenant_file(dir_, "t", kUserA, error)) << error;  // what slicectl set --group does

  // Its environment asks for 1 GiB: the reservations are still refused at the policy's cap.
  Process& big = spawn_as(kUserA, "t", {"--memory", "1Gi"}, {"reserve-once", "65Mi"});
  EXPECT_EQ(big.read_line(), "refused usage=0 cap=" + std::to_string(64 * MiB));
  Process& fits = spawn_as(kUserA, "t", {"--memory", "1Gi"}, {"reserve-once", "64Mi"});
  EXPECT_EQ(fits.read_line(), "ok");
  struct stat st {};
  ASSERT_EQ(stat(tenant_path("t").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "a managed tenant's file is root's";
  EXPECT_EQ(st.st_gid, static_cast<gid_t>(kUserA)) << "and its processes' group's";
  EXPECT_EQ(st.st_mode & 07777, 0664u);

  // It cannot write, replace, remove or add policy, for itself or for another tenant.
  const std::string folder = policy_dir_;
  EXPECT_NE(shell_as(kUserA, "echo 'memory_limit = 1Ti' > " + folder + "/t"), 0);
  EXPECT_NE(shell_as(kUserA, "echo 'memory_limit = 1Ti' >> " + folder + "/t"), 0);
  EXPECT_NE(shell_as(kUserA, "rm -f " + folder + "/t && test ! -e " + folder + "/t"), 0);
  EXPECT_NE(shell_as(kUserA, "echo 'memory_limit = 1Ti' > " + folder + "/other"), 0);
  EXPECT_NE(shell_as(kUserA, "mv " + folder + " " + dir_ + "/old-policy"), 0);
  EXPECT_NE(shell_as(kUserA, "echo 1 > " + folder + "/.generation"), 0);
  Policy still;
  std::string message;
  ASSERT_EQ(read_policy(policy_dir_, "t", still, message), PolicyStatus::ok) << message;
  EXPECT_EQ(still.memory, MemoryLimit::of_bytes(64 * MiB));
  EXPECT_FALSE(std::filesystem::exists(folder + "/other"));

  Process& after = spawn_as(kUserA, "t", {"--memory", "1Gi"}, {"reserve-once", "65Mi"});
  EXPECT_EQ(after.read_line(), "refused usage=0 cap=" + std::to_string(64 * MiB));
}

TEST_F(Unprivileged, ATenantCannotTouchAnotherUsersTenant) {
  Process& holder = spawn_as(kUserB, "b", {"--memory", "1Gi"}, {"hold", "100Mi"});
  ASSERT_EQ(holder.read_line(), "ready");
  const std::string path = tenant_path("b");

  // Joining it (which would let it release b's usage) is refused with a clear error.
  Process& intruder = spawn_as(kUserA, "b", {"--memory", "1Gi"}, {"join"});
  const auto line = intruder.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("belongs to another user"), std::string::npos) << *line;
  // So is reaping it, and writing, truncating, replacing or deleting its file.
  Process& reaper = spawn_as(kUserA, "b", {}, {"reap"});
  const auto reap_line = reaper.read_line();
  ASSERT_TRUE(reap_line.has_value());
  EXPECT_EQ(reap_line->rfind("error", 0), 0u) << *reap_line;
  EXPECT_NE(shell_as(kUserA, "printf 'xxxxxxxx' | dd of=" + path + " bs=1 seek=0 conv=notrunc 2>/dev/null"), 0);
  EXPECT_NE(shell_as(kUserA, "truncate -s 0 " + path), 0);
  EXPECT_NE(shell_as(kUserA, "rm -f " + path + " && test ! -e " + path), 0) << "the sticky folder protects it";
  EXPECT_NE(shell_as(kUserA, "mv " + path + " " + dir_ + "/tenants/stolen"), 0);
  // It may read it (the tools run as anyone): b is intact and still charged its 100 MiB.
  EXPECT_EQ(shell_as(kUserA, "test -r " + path), 0);
  TenantWatch watch(dir_, "b");
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ(watch.total(), 100 * MiB);
  std::string error;
  auto views = read_coordinator(dir_, policy_dir_, error);
  const TenantView* b = find_tenant(views, "b");
  ASSERT_NE(b, nullptr) << error;
  EXPECT_TRUE(b->readable) << b->problem;
  EXPECT_EQ(b->processes.size(), 1u);
  EXPECT_EQ(kill(holder.pid(), 0), 0);
  // Its own tenant, beside b, works.
  Process& own = spawn_as(kUserA, "a", {"--memory", "1Gi"}, {"reserve-once", "1Gi"});
  EXPECT_EQ(own.read_line(), "ok");
}

// A tenant that could delete or wreck its own file would start again from zero usage, past its
// cap: a managed tenant's file is root's (sticky folder: only root may remove it), and a wrecked
// one is rebuilt only by root.
TEST_F(Unprivileged, DeletingOrWreckingItsOwnTenantFileDoesNotResetItsUsage) {
  Policy p;
  p.memory = MemoryLimit::of_bytes(64 * MiB);
  std::string error;
  ASSERT_TRUE(write_policy(policy_dir_, "t", p, error)) << error;
  ASSERT_TRUE(adopt_tenant_file(dir_, "t", kUserA, error)) << error;
  Process& holder = spawn_as(kUserA, "t", {}, {"hold", "64Mi"});
  ASSERT_EQ(holder.read_line(), "ready");
  EXPECT_NE(shell_as(kUserA, "rm -f " + tenant_path("t") + " && test ! -e " + tenant_path("t")), 0);
  EXPECT_NE(shell_as(kUserA, "mv " + tenant_path("t") + " " + dir_ + "/tenants/gone"), 0);
  shell_as(kUserA, "rm -f " + tenant_path("t"));  // allowed or not, the cap must hold
  Process& second = spawn_as(kUserA, "t", {}, {"reserve-once", "64Mi"});
  const auto line = second.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->rfind("refused", 0), 0u) << "a second 64 MiB under a 64 MiB cap: " << *line;

  // Truncating it (it may write it) wrecks it: its holder dies of it, and nobody but root rebuilds it.
  shell_as(kUserA, "truncate -s 0 " + tenant_path("t"));
  Process& third = spawn_as(kUserA, "t", {}, {"reserve-once", "64Mi"});
  const auto third_line = third.read_line();
  ASSERT_TRUE(third_line.has_value());
  EXPECT_EQ(third_line->rfind("ok", 0), std::string::npos) << "a wrecked file gave a fresh cap: " << *third_line;
}

}  // namespace
}  // namespace slice::test
