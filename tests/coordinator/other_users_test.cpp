// What one local user can do to another's slice, or to root, with nothing but the access the
// coordinator's files give them (issue 29). Each test runs the attack as a second user (setpriv to
// uid 1000; the victims are root and uid 1001) and checks that it harms nobody. Every one of these
// attacks worked on ba97fea.
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "coordinator_view.h"
#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t MiB = 1ull << 20;
constexpr int kAttacker = 1000, kVictim = 1001;

const char* intruder_path() { return COORDINATOR_INTRUDER; }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class OtherUsers : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    if (!can_switch_user()) GTEST_SKIP() << "needs root and setpriv to run processes as other users";
    // The test's temporary folders are root's and private: open them (only them) to other users.
    chmod(root_.c_str(), 0755);
    if (const char* base = std::getenv("SLICE_TEST_TMPDIR")) chmod(base, 0755);
    std::string error;
    ASSERT_TRUE(prepare_coordinator_dir(dir_, error)) << error;  // root's, as the package makes it
    if (run_command(as_user(kAttacker, {"/bin/sh", "-c",
                                        "test -x " + dir_ + "/tenants && test -x " + worker_path() + " && test -x " +
                                            intruder_path()})) != 0)
      GTEST_SKIP() << "user " << kAttacker << " cannot reach " << dir_ << " or the test's programs";
  }
  Process& as(int uid, const std::vector<std::string>& argv) { return spawn(as_user(uid, argv)); }
  Process& worker_as(int uid, const std::string& dir, const std::string& tenant,
                     const std::vector<std::string>& options, const std::vector<std::string>& command) {
    return as(uid, worker(dir, tenant, options, command));
  }
  // A tenant made by `uid` (one process joins, registers its limit and exits).
  void tenant_made_by(int uid, const std::string& dir, const std::string& tenant, const std::string& memory) {
    Process& p = worker_as(uid, dir, tenant, {"--memory", memory}, {"join"});
    ASSERT_EQ(p.read_line(), "ready");
    p.kill(SIGKILL);
    p.wait();
  }
};

// 1. Root removes a file of the attacker's choosing: the attacker owns the coordinator folder (it
// ran the first GPU program, before any tmpfiles entry made it), holds the tenant's registration
// lock while root's `slicectl rm` waits for it, and swaps tenants/ for a link to a folder of root's.
TEST_F(OtherUsers, RootNeverWorksInAFolderAUserMadeNorRemovesThroughAFolderSwapped) {
  const std::string open = root_ + "/open";
  ASSERT_TRUE(std::filesystem::create_directory(open));
  chmod(open.c_str(), 01777);
  const std::string users_dir = open + "/coordinator";
  tenant_made_by(kAttacker, users_dir, "t", "64Mi");  // the folder is the attacker's now
  const std::string victim = root_ + "/victim";
  ASSERT_TRUE(std::filesystem::create_directory(victim));
  { std::ofstream(victim + "/t") << "root's own file"; }

  // Root's processes do not join there, nor does its gc reap there.
  JoinRequest r;
  r.dir = users_dir;
  r.policy_dir = policy_dir_;
  r.tenant = "roots";
  r.devices.push_back(fake_gpu(0, MemoryLimit::of_bytes(64 * MiB)));
  std::vector<std::string> warnings;
  std::string error;
  EXPECT_EQ(Coordinator::join(r, error, warnings), nullptr) << "root's process joined a user's folder";
  std::printf("join: %s\n", error.c_str());
  EXPECT_NE(error.find("belongs to root"), std::string::npos) << error;
  EXPECT_EQ(reap_tenant(users_dir, "t", error), -1);
  EXPECT_NE(error.find("belongs to root"), std::string::npos) << error;

  Process& intruder = as(kAttacker, {intruder_path(), "swap-during-rm", users_dir, "t", victim});
  ASSERT_EQ(intruder.read_line(), "held");
  error.clear();
  EXPECT_FALSE(remove_tenant(users_dir, "t", false, error)) << "root removed a tenant in a user's folder";
  std::printf("slicectl rm: %s\n", error.c_str());
  intruder.read_line(3000);  // "swapped", once it has let the lock go
  EXPECT_EQ(read_text(victim + "/t"), "root's own file") << "root removed (or changed) its own file through the link";
  EXPECT_NE(error.find("belongs to root"), std::string::npos) << error;
}

// 2. A name squatted before root's first process: the squatter's file would decide the limits of
// root's service (it got "registered limit 1 B").
TEST_F(OtherUsers, RootsProcessNeverJoinsATenantAUserMadeFirst) {
  tenant_made_by(kAttacker, dir_, "inference", "1");
  std::vector<std::string> warnings;
  std::string error;
  auto c = join("inference", MemoryLimit::of_bytes(4096 * MiB), {0}, &warnings, &error);
  EXPECT_EQ(c, nullptr) << "root's process joined a tenant a user made, and lives by its limits";
  EXPECT_NE(error.find("made by user " + std::to_string(kAttacker)), std::string::npos) << error;
  std::printf("join: %s\n", error.c_str());
}

// ...and before the device plugin's Allocate (the names are predictable): Allocate adopts the name,
// and the pod's processes live by their own limits, not the squatter's.
TEST_F(OtherUsers, ANameSquattedBeforeAnAllocateIsTakenBackWhole) {
  tenant_made_by(kAttacker, dir_, "k8s-default-pod-0", "1");
  // The squatter keeps a process in it: a name held so could never be taken back.
  Process& squatter = worker_as(kAttacker, dir_, "k8s-default-pod-0", {}, {"join"});
  ASSERT_EQ(squatter.read_line(), "ready");
  std::string error, notice;
  ASSERT_TRUE(adopt_tenant_file(dir_, "k8s-default-pod-0", kVictim, error, &notice)) << error;
  EXPECT_NE(notice.find("1 process of user " + std::to_string(kAttacker) + " still run"), std::string::npos) << notice;
  Process& pod = worker_as(kVictim, dir_, "k8s-default-pod-0", {"--memory", "64Mi"}, {"reserve-once", "64Mi"});
  EXPECT_EQ(pod.read_line(), "ok") << "the squatter's registered limit held in the pod";
  struct stat st {};
  ASSERT_EQ(stat(tenant_path("k8s-default-pod-0").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

// 3. A read lock taken by anyone who may read the tenant file (every user) counted as held: on
// the registration byte every new process failed after 2 s; on the slot bytes a killed process's
// memory stayed charged and gc reaped nothing.
TEST_F(OtherUsers, AReadLockOnEveryByteLocksNobodyOut) {
  Process& holder = worker_as(kVictim, dir_, "t", {"--memory", "1Gi"}, {"hold", "64Mi"});
  ASSERT_EQ(holder.read_line(), "ready");
  Process& intruder = as(kAttacker, {intruder_path(), "lock-every-byte", dir_, "t"});
  ASSERT_EQ(intruder.read_line(), "locked");

  Process& newcomer = worker_as(kVictim, dir_, "t", {}, {"reserve-once", "1Mi"});
  EXPECT_EQ(newcomer.read_line(), "ok") << "a process of the tenant could not join under another user's read lock";

  holder.kill(SIGKILL);
  holder.wait();
  std::string error;
  EXPECT_EQ(reap_tenant(dir_, "t", error), 1) << "the killed process was not reaped: " << error;
  Process& after = worker_as(kVictim, dir_, "t", {}, {"reserve-once", "1Gi"});
  EXPECT_EQ(after.read_line(), "ok") << "the killed process's memory stayed charged";
}

// A lock file planted before the tenant's own: the tenant's processes refuse it (its maker could
// take its locks) and say so, and root's gc clears it.
TEST_F(OtherUsers, ALockFilePlantedBeforeATenantIsRefusedAndClearedByGc) {
  // Planted, and held: a lock in it must not keep it there.
  ASSERT_EQ(run_command(as_user(kAttacker, {"touch", dir_ + "/locks/mine"})), 0);
  Process& holder = as(kAttacker, {intruder_path(), "lock-every-byte", dir_, "mine"});
  ASSERT_EQ(holder.read_line(), "locked");
  Process& early = worker_as(kVictim, dir_, "mine", {}, {"reserve-once", "1Mi"});
  const auto line = early.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("lock file"), std::string::npos) << *line;
  EXPECT_EQ(remove_stray_lock_files(dir_), 1);
  Process& later = worker_as(kVictim, dir_, "mine", {}, {"reserve-once", "1Mi"});
  EXPECT_EQ(later.read_line(), "ok");
}

// The shared folders inside the coordinator folder made by another user (where no tmpfiles entry
// made them, a member of the group came first): its maker could remove anyone's lock files there.
TEST_F(OtherUsers, ALocksFolderAnotherUserMadeIsRefused) {
  ASSERT_EQ(rmdir((dir_ + "/locks").c_str()), 0);
  chmod(dir_.c_str(), 01777);  // root's, shared, as root's first process makes it
  ASSERT_EQ(run_command(as_user(kAttacker, {"/bin/sh", "-c", "mkdir -m 1777 " + dir_ + "/locks"})), 0);
  Process& victim = worker_as(kVictim, dir_, "mine", {}, {"reserve-once", "1Mi"});
  const auto line = victim.read_line();
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("locks belongs to user " + std::to_string(kAttacker)), std::string::npos) << *line;
}

// 6. Adoption changed the owner in place: a former writer truncated the file through a descriptor
// it opened before, and every process of the tenant died of SIGBUS.
TEST_F(OtherUsers, AFormerWriterCannotTruncateAnAdoptedTenant) {
  tenant_made_by(kAttacker, dir_, "shared", "1Gi");
  Process& former = as(kAttacker, {intruder_path(), "hold-open", dir_, "shared"});
  ASSERT_EQ(former.read_line(), "open");
  std::string error;
  ASSERT_TRUE(adopt_tenant_file(dir_, "shared", kVictim, error)) << error;  // slicectl set shared --group

  Process& member = worker_as(kVictim, dir_, "shared", {"--sync", "--memory", "1Gi"}, {"reserve-once", "16Mi"});
  ASSERT_EQ(member.read_line(), "joined");
  former.send_line();
  EXPECT_EQ(former.read_line(), "truncated");
  member.send_line();
  EXPECT_EQ(member.read_line(), "ok");
  EXPECT_EQ(member.wait(), 0) << "the tenant's process died (SIGBUS is " << 128 + SIGBUS << ")";
}

}  // namespace
}  // namespace slice::test
