// Administrator policy: it wins over what a tenant registered, it is trusted only when root-owned
// and writable by nobody else, and a running process picks up a change (the generation counter).
#include <cstring>
#include <functional>

#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

class PolicyTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    std::string error;
    ASSERT_TRUE(prepare_coordinator_dir(dir_, error)) << error;
  }
  void set_policy(const std::string& tenant, const std::string& text) {
    Policy p;
    std::string message;
    ASSERT_TRUE(parse_policy(text, p, message)) << message;
    std::string error;
    ASSERT_TRUE(write_policy(policy_dir_, tenant, p, error)) << error;
  }
};

TEST(PolicyText, ParsesEveryKeyAndNamesTheBadLine) {
  Policy p;
  std::string message;
  ASSERT_TRUE(
      parse_policy("# comment\nmemory_limit = 4Gi\n"
                   "memory_limit.GPU-511ce07e-5700-0000-0000-000000000001 = 25%  # per GPU\n"
                   "compute_share = 30\ncompute_limit=50\npriority = high\ngroup = 4242\n",
                   p, message))
      << message;
  EXPECT_EQ(p.memory, MemoryLimit::of_bytes(4 * GiB));
  const Uuid gpu1 = fake_gpu_uuid(1), gpu2 = fake_gpu_uuid(2);
  EXPECT_EQ(p.memory_for(gpu1.data()), MemoryLimit::of_device_billionths(MemoryLimit::kWholeDevice / 4));
  EXPECT_EQ(p.memory_for(gpu2.data()), MemoryLimit::of_bytes(4 * GiB));
  EXPECT_EQ(p.compute_share, 30u);
  EXPECT_EQ(p.compute_limit, 50u);
  EXPECT_EQ(p.group, 4242u);
  // The text it writes reads back the same.
  Policy again;
  ASSERT_TRUE(parse_policy(p.to_text("t"), again, message)) << message;
  EXPECT_EQ(again.memory, p.memory);
  EXPECT_EQ(again.per_gpu, p.per_gpu);
  EXPECT_EQ(again.compute_share, p.compute_share);
  EXPECT_EQ(again.priority, p.priority);
  EXPECT_EQ(again.group, p.group);
  // A group by number only: a name could be another group where it is read at boot.
  EXPECT_FALSE(parse_policy("group = staff\n", p, message));
  EXPECT_NE(message.find("group number"), std::string::npos) << message;

  EXPECT_FALSE(parse_policy("memory_limit = 4Gi\nmemory_limit = lots\n", p, message));
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  EXPECT_FALSE(parse_policy("colour = blue\n", p, message));
  EXPECT_NE(message.find("unknown key 'colour'"), std::string::npos) << message;
  EXPECT_FALSE(parse_policy("memory_limit 4Gi\n", p, message));
  EXPECT_FALSE(parse_policy("compute_share = 0\n", p, message));
}

// The policy folder is its own, apart from the volatile coordinator folder: wiping the coordinator
// (a reboot) leaves the policy, and a new process is held to it from its first reservation.
TEST_F(PolicyTest, OutlastsTheCoordinatorFolder) {
  if (!is_root()) GTEST_SKIP() << "a trusted policy must be root-owned: needs root";
  set_policy("t", "memory_limit = 512Mi\n");
  {
    auto c = join("t", MemoryLimit::of_bytes(GiB));
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->cap(0), 512 * MiB);
  }
  std::filesystem::remove_all(dir_);
  auto c = join("t", MemoryLimit::of_bytes(GiB));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->cap(0), 512 * MiB);
  EXPECT_FALSE(c->reserve(0, 600 * MiB)) << "held to the policy from its first reservation";
}

// prepare_machine (slicectl prepare): the folders, and a root-owned file with the policy's group for
// each managed tenant; policy_tenants lists them; remove_policy takes one away.
TEST_F(PolicyTest, PrepareMachineMakesManagedTenantsFiles) {
  if (!is_root()) GTEST_SKIP() << "needs root";
  set_policy("a", "memory_limit = 1Gi\ngroup = 4242\n");
  set_policy("b", "compute_share = 20\n");
  EXPECT_EQ(policy_tenants(policy_dir_), (std::vector<std::string>{"a", "b"}));
  std::filesystem::remove_all(dir_);
  std::vector<std::string> done, problems;
  std::string error;
  ASSERT_TRUE(prepare_machine(dir_, policy_dir_, done, problems, error)) << error;
  EXPECT_EQ(done.size(), 2u);
  EXPECT_TRUE(problems.empty());
  struct stat st {};
  ASSERT_EQ(stat(tenant_path("a").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 4242u);
  ASSERT_EQ(stat(tenant_path("b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_TRUE(remove_policy(policy_dir_, "a", error)) << error;
  ASSERT_TRUE(remove_policy(policy_dir_, "a", error)) << "removing one that is gone is no error";
  EXPECT_EQ(policy_tenants(policy_dir_), std::vector<std::string>{"b"});
}

TEST_F(PolicyTest, WinsOverTheRegisteredLimit) {
  if (!is_root()) GTEST_SKIP() << "a trusted policy must be root-owned: needs root";
  set_policy("t", "memory_limit = 512Mi\nmemory_limit.GPU-511ce07e-5700-0000-0000-000000000001 = 2Gi\n");
  auto c = join("t", MemoryLimit::of_bytes(GiB), {0, 1});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->cap(0), 512 * MiB);
  EXPECT_EQ(c->cap(1), 2 * GiB) << "a per-GPU policy wins over the all-GPU one";
  Refusal why;
  EXPECT_FALSE(c->reserve(0, 600 * MiB, &why));
  EXPECT_EQ(why.cap, 512 * MiB);
  EXPECT_TRUE(c->reserve(1, 1536 * MiB)) << "past the registered 1 GiB: the policy allows it";
  // The tools show the effective cap.
  std::string error;
  auto views = read_coordinator(dir_, policy_dir_, error);
  const TenantView* v = find_tenant(views, "t");
  ASSERT_NE(v, nullptr) << error;
  EXPECT_TRUE(v->policy);
  ASSERT_EQ(v->gpus.size(), 2u);
  EXPECT_EQ(v->gpus[0].cap_bytes, 512 * MiB);
  EXPECT_EQ(v->gpus[1].cap_bytes, 2 * GiB);
}

TEST_F(PolicyTest, APerGpuPolicyFollowsTheDriversUuidNotTheTenantFiles) {
  if (!is_root()) GTEST_SKIP() << "a trusted policy must be root-owned: needs root";
  set_policy("t", "memory_limit.GPU-511ce07e-5700-0000-0000-000000000001 = 256Mi\n");
  auto c = join("t", MemoryLimit::of_bytes(GiB), {1});
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->cap(0), 256 * MiB);
  // A process of the tenant rewrites its own (writable) file's record of the GPU...
  DeviceEntry& entry = c->device_entry(0);
  const Uuid other = fake_gpu_uuid(2);
  std::memcpy(entry.uuid, other.data(), 16);
  // ...and a policy change makes every process read the policy again: the cap is still the GPU's.
  set_policy("t", "memory_limit.GPU-511ce07e-5700-0000-0000-000000000001 = 128Mi\n");
  EXPECT_EQ(c->cap(0), 128 * MiB);
  EXPECT_FALSE(c->reserve(0, 200 * MiB));
}

TEST_F(PolicyTest, UntrustedPoliciesAreIgnored) {
  if (!is_root()) GTEST_SKIP() << "needs root to make files of other owners";
  set_policy("t", "memory_limit = 512Mi\n");
  const std::string folder = policy_dir_, file = folder + "/t";
  Policy p;
  std::string message;
  ASSERT_EQ(read_policy(policy_dir_, "t", p, message), PolicyStatus::ok) << message;

  struct Case {
    const char* what;
    std::function<void()> spoil, mend;
  };
  const std::vector<Case> cases = {
      {"file of another owner", [&] { ASSERT_EQ(chown(file.c_str(), 1000, 1000), 0); },
       [&] { ASSERT_EQ(chown(file.c_str(), 0, 0), 0); }},
      {"group-writable file", [&] { chmod(file.c_str(), 0664); }, [&] { chmod(file.c_str(), 0644); }},
      {"world-writable file", [&] { chmod(file.c_str(), 0646); }, [&] { chmod(file.c_str(), 0644); }},
      {"folder of another owner", [&] { ASSERT_EQ(chown(folder.c_str(), 1000, 1000), 0); },
       [&] { ASSERT_EQ(chown(folder.c_str(), 0, 0), 0); }},
      {"world-writable folder", [&] { chmod(folder.c_str(), 0777); }, [&] { chmod(folder.c_str(), 0755); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    c.spoil();
    EXPECT_EQ(read_policy(policy_dir_, "t", p, message), PolicyStatus::untrusted);
    EXPECT_NE(message.find("is ignored"), std::string::npos) << message;
    auto joined = join("t", MemoryLimit::of_bytes(GiB));
    ASSERT_NE(joined, nullptr);
    EXPECT_EQ(joined->cap(0), GiB) << "the registered limit, not the untrusted policy";
    std::string error;
    auto views = read_coordinator(dir_, policy_dir_, error);
    ASSERT_EQ(views.size(), 1u) << error;
    EXPECT_FALSE(views[0].policy);
    joined.reset();
    c.mend();
    EXPECT_EQ(read_policy(policy_dir_, "t", p, message), PolicyStatus::ok) << message;
  }
  // A symbolic link in place of the policy is not followed.
  ASSERT_EQ(rename(file.c_str(), (folder + "/real").c_str()), 0);
  ASSERT_EQ(symlink("real", file.c_str()), 0);
  EXPECT_NE(read_policy(policy_dir_, "t", p, message), PolicyStatus::ok);
}

// A tenant that creates the policy folder before the administrator does must not make the
// administrator's later policy silently untrusted: writing it is a clear error instead.
TEST_F(PolicyTest, WritingIntoAFolderATenantPlantedIsAnError) {
  if (!is_root()) GTEST_SKIP() << "needs root to plant a folder of another owner";
  const std::string folder = policy_dir_;
  std::filesystem::remove_all(folder);  // as if the tenant had come first (root's join makes it)
  ASSERT_EQ(mkdir(folder.c_str(), 0755), 0);
  ASSERT_EQ(chown(folder.c_str(), 1000, 1000), 0);
  Policy p;
  p.memory = MemoryLimit::of_bytes(GiB);
  std::string error;
  EXPECT_FALSE(write_policy(policy_dir_, "t", p, error));
  EXPECT_NE(error.find(folder), std::string::npos) << error;
  // A symbolic link planted in its place: the same.
  ASSERT_EQ(rmdir(folder.c_str()), 0);
  const std::string elsewhere = root_ + "/elsewhere";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0755), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), folder.c_str()), 0);
  EXPECT_FALSE(write_policy(policy_dir_, "t", p, error));
  EXPECT_FALSE(std::filesystem::exists(elsewhere + "/t"));
}

// An administrator's typo never means "no cap" (issue 29: it did): a new process of the tenant
// does not start, and says why; a running one keeps the limits last read.
TEST_F(PolicyTest, AnInvalidPolicyFailsClosed) {
  if (!is_root()) GTEST_SKIP() << "a policy must be root-owned: needs root";
  set_policy("t", "memory_limit = 512Mi\n");
  auto running = join("t", MemoryLimit::of_bytes(GiB));
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->cap(0), 512 * MiB);
  write_file(policy_dir_ + "/t", "memory_limit = plenty\n");
  Policy p;
  std::string message;
  EXPECT_EQ(read_policy(policy_dir_, "t", p, message), PolicyStatus::invalid);
  EXPECT_NE(message.find("line 1"), std::string::npos) << message;
  std::string error;
  EXPECT_EQ(join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr)
      << "a typo let a process run uncapped";
  EXPECT_NE(error.find("line 1"), std::string::npos) << error;
  EXPECT_NE(error.find(policy_dir_ + "/t"), std::string::npos) << error;
  set_policy("another", "memory_limit = 1Gi\n");  // bumps the generation: every process reads again
  EXPECT_EQ(running->cap(0), 512 * MiB) << "the running process lost its cap to a typo";
}

TEST_F(PolicyTest, ARunningProcessPicksUpAChange) {
  if (!is_root()) GTEST_SKIP() << "a policy must be root-owned: needs root";
  auto c = join("t", MemoryLimit::of_bytes(GiB));  // no policy for it yet
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->cap(0), GiB);
  ASSERT_TRUE(c->reserve(0, 100 * MiB));

  // The first policy. Were the folder missing when the process joined (a root join makes it), the
  // process would look for it again once a second: either way it is seen within that second.
  const auto t0 = std::chrono::steady_clock::now();
  set_policy("t", "memory_limit = 256Mi\n");
  while (c->cap(0) != 256 * MiB && seconds_since(t0) < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double first = seconds_since(t0);
  EXPECT_EQ(c->cap(0), 256 * MiB);
  EXPECT_LT(first, 1.5);
  std::printf("first policy seen after %.3f s\n", first);

  // Later changes: at the very next call.
  set_policy("t", "memory_limit = 128Mi\n");
  EXPECT_EQ(c->cap(0), 128 * MiB);
  Refusal why;
  EXPECT_FALSE(c->reserve(0, 100 * MiB, &why));
  EXPECT_EQ(why.cap, 128 * MiB);
  set_policy("t", "compute_share = 50\n");  // no memory limit in the policy: the registered one
  EXPECT_EQ(c->cap(0), GiB);
  EXPECT_TRUE(c->reserve(0, 100 * MiB));
}

}  // namespace
}  // namespace slice::test
