// slice-device-plugin against a fake kubelet, on the simulated GPU (2 GPUs of 8 GiB, 4 slices
// each): registration, ListAndWatch, preferred allocation, Allocate's env, mounts and policy,
// processes run with exactly an Allocate response's env capped at their slice (also when their own
// env asks for more), two "containers" in PID namespaces seeing each other, health, a kubelet
// restart, and SIGTERM.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "fake_kubelet.h"
#include "policy.h"
#include "process_helpers.h"

namespace {

using namespace std::chrono_literals;
using k8s_test::FakeKubelet;

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kSliceBytes = 2048 * kMiB;  // 8 GiB / 4
const std::string kGpu0 = "GPU-516d696d-6770-4075-8000-000000000000";
const std::string kGpu1 = "GPU-516d696d-6770-4075-8000-000000000001";
const std::string kSocketName = "libslice-test.sock";

std::string underscored(std::string uuid) {
  for (char& c : uuid)
    if (c == '-') c = '_';
  return uuid;
}

class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the plugin writes root-owned policies: run as root";
    const char* base = std::getenv("SLICE_TEST_TMPDIR");
    ASSERT_NE(base, nullptr) << "run through tests/run_isolated.sh";
    // Short: a Unix socket's path has at most 107 characters.
    static int test_number = 0;
    dir_ = std::string(base) + "/t" + std::to_string(++test_number);
    std::filesystem::create_directories(dir_ + "/device-plugins");
    std::filesystem::create_directories(dir_ + "/lib");
    // What the init container installs.
    std::filesystem::copy_file(LIBSLICE_PATH, dir_ + "/lib/libslice.so");
    std::ofstream(dir_ + "/lib/ld.so.preload") << "/usr/local/libslice/libslice.so\n";
    simgpu_state_ = dir_ + "/simgpu-state";
    kubelet_ = std::make_unique<FakeKubelet>(kubelet_socket());
    ASSERT_TRUE(kubelet_->start());
  }
  void TearDown() override {
    if (plugin_ > 0) {
      ::kill(plugin_, SIGTERM);
      k8s_test::wait_exit(plugin_, 10s);
    }
    kubelet_.reset();
  }

  std::string kubelet_socket() const { return dir_ + "/device-plugins/kubelet.sock"; }
  std::string plugin_socket() const { return dir_ + "/device-plugins/" + kSocketName; }
  std::string coordinator() const { return dir_ + "/coordinator"; }
  std::string policies() const { return dir_ + "/policy"; }

  std::map<std::string, std::string> simulator_env() const {
    return {{"LD_LIBRARY_PATH", SIMGPU_LIB_DIR},
            {"SIMGPU_STATE", simgpu_state_},
            {"SIMGPU_DEVICES", "2"},
            {"SIMGPU_MEMORY", "8Gi"},
            {"PATH", "/usr/bin:/bin:/usr/sbin:/sbin"}};
  }

  void start_plugin(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {PLUGIN_PATH, "--device-plugin-dir", dir_ + "/device-plugins", "--socket-name",
                                     kSocketName, "--slices", "4", "--coordinator-dir", coordinator(),
                                     // The test's "containers" share the host's paths: no mount namespace.
                                     "--container-coordinator-dir", coordinator(), "--host-lib-dir", dir_ + "/lib",
                                     "--policy-dir", policies(), "--container-policy-dir", policies(),
                                     "--health-interval", "0.1", "--log-level", "debug"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    plugin_ = k8s_test::spawn(argv, simulator_env(), dir_ + "/plugin.log");
    ASSERT_GT(plugin_, 0);
    const auto registrations = kubelet_->wait_for(1, 20s);
    ASSERT_EQ(registrations.size(), 1u) << k8s_test::read_file(dir_ + "/plugin.log");
  }

  std::unique_ptr<v1beta1::DevicePlugin::Stub> dial() const {
    return v1beta1::DevicePlugin::NewStub(
        grpc::CreateChannel("unix://" + plugin_socket(), grpc::InsecureChannelCredentials()));
  }

  static void deadline(grpc::ClientContext& context, std::chrono::seconds s) {
    context.set_deadline(std::chrono::system_clock::now() + s);
  }

  v1beta1::ContainerAllocateResponse allocate(const std::vector<std::string>& ids, grpc::Status* status = nullptr) {
    v1beta1::AllocateRequest request;
    auto* c = request.add_container_requests();
    for (const std::string& id : ids) c->add_devices_ids(id);
    v1beta1::AllocateResponse response;
    grpc::ClientContext context;
    deadline(context, 10s);
    const grpc::Status s = dial()->Allocate(&context, request, &response);
    if (status != nullptr)
      *status = s;
    else
      EXPECT_TRUE(s.ok()) << s.error_message();
    return response.container_responses_size() == 1 ? response.container_responses(0)
                                                    : v1beta1::ContainerAllocateResponse{};
  }

  // A "container": exactly the env of an Allocate response, plus libslice preloaded (the test has
  // no mount namespace for /etc/ld.so.preload) and the simulated GPU.
  std::map<std::string, std::string> container_env(const v1beta1::ContainerAllocateResponse& r) const {
    std::map<std::string, std::string> env = simulator_env();
    for (const auto& [k, v] : r.envs()) env[k] = v;
    env["LD_PRELOAD"] = LIBSLICE_PATH;
    return env;
  }

  int run_load(const std::map<std::string, std::string>& env, std::uint64_t mib, const std::string& log) {
    const pid_t pid =
        k8s_test::spawn({SIMGPU_LOAD_PATH, "--seconds", "0", "--alloc-mib", std::to_string(mib)}, env, log);
    return k8s_test::wait_exit(pid, 30s);
  }

  std::string dir_;
  std::string simgpu_state_;
  std::unique_ptr<FakeKubelet> kubelet_;
  pid_t plugin_ = -1;
};

std::vector<v1beta1::Device> first_list(v1beta1::DevicePlugin::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  auto reader = stub.ListAndWatch(&context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse response;
  EXPECT_TRUE(reader->Read(&response));
  context.TryCancel();
  return {response.devices().begin(), response.devices().end()};
}

TEST_F(DevicePluginTest, RegistersAndAdvertisesSlices) {
  start_plugin();
  const v1beta1::RegisterRequest r = kubelet_->wait_for(1, 1s).at(0);
  EXPECT_EQ(r.version(), "v1beta1");
  EXPECT_EQ(r.endpoint(), kSocketName);
  EXPECT_EQ(r.resource_name(), "libslice.io/gpu-slice");
  EXPECT_TRUE(r.options().get_preferred_allocation_available());
  EXPECT_FALSE(r.options().pre_start_required());

  auto stub = dial();
  grpc::ClientContext context;
  deadline(context, 10s);
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(stub->GetDevicePluginOptions(&context, v1beta1::Empty(), &options).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());

  std::set<std::string> ids;
  for (const v1beta1::Device& d : first_list(*stub)) {
    EXPECT_EQ(d.health(), "Healthy") << d.id();
    EXPECT_LE(d.id().size(), 63u);
    ids.insert(d.id());
  }
  std::set<std::string> expected;
  for (const std::string& gpu : {kGpu0, kGpu1})
    for (int k = 0; k < 4; ++k) expected.insert(gpu + "::" + std::to_string(k));
  EXPECT_EQ(ids, expected);
}

TEST_F(DevicePluginTest, PreferredAllocationPacksOneGpuAndKeepsMustInclude) {
  start_plugin();
  v1beta1::PreferredAllocationRequest request;
  // GPU 0 has one free slice, GPU 1 three: two slices fit only on GPU 1.
  auto* a = request.add_container_requests();
  for (const std::string& id : {kGpu0 + "::3", kGpu1 + "::0", kGpu1 + "::2", kGpu1 + "::3"})
    a->add_available_deviceids(id);
  a->set_allocation_size(2);
  // The kubelet insists on GPU 0's slice 1: the rest comes from GPU 0 too.
  auto* b = request.add_container_requests();
  for (int k = 0; k < 4; ++k) {
    b->add_available_deviceids(kGpu0 + "::" + std::to_string(k));
    b->add_available_deviceids(kGpu1 + "::" + std::to_string(k));
  }
  b->add_must_include_deviceids(kGpu0 + "::1");
  b->set_allocation_size(3);
  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext context;
  deadline(context, 10s);
  ASSERT_TRUE(dial()->GetPreferredAllocation(&context, request, &response).ok());
  ASSERT_EQ(response.container_responses_size(), 2);
  const auto& first = response.container_responses(0).deviceids();
  EXPECT_EQ(std::vector<std::string>(first.begin(), first.end()),
            (std::vector<std::string>{kGpu1 + "::0", kGpu1 + "::2"}));
  const auto& second = response.container_responses(1).deviceids();
  EXPECT_EQ(std::vector<std::string>(second.begin(), second.end()),
            (std::vector<std::string>{kGpu0 + "::1", kGpu0 + "::0", kGpu0 + "::2"}));
}

TEST_F(DevicePluginTest, AllocateGivesGpuVariablesMountsAndPolicy) {
  start_plugin();
  const auto r = allocate({kGpu1 + "::2", kGpu1 + "::0"});
  const std::string tenant = "k8s-00000001-0-2";
  const std::map<std::string, std::string> env(r.envs().begin(), r.envs().end());
  const std::map<std::string, std::string> expected = {
      {"NVIDIA_VISIBLE_DEVICES", kGpu1},
      {"SLICE_MEMORY_LIMIT_" + underscored(kGpu1), std::to_string(2 * kSliceBytes)},
      {"SLICE_COMPUTE_SHARE_" + underscored(kGpu1), "50"},
      {"SLICE_TENANT", tenant},
      {"SLICE_COORDINATOR_DIR", coordinator()},
      {"SLICE_POLICY_DIR", policies()}};
  EXPECT_EQ(env, expected);
  ASSERT_EQ(r.mounts_size(), 4);
  std::map<std::string, std::pair<std::string, bool>> mounts;  // container path -> host path, read-only
  for (const auto& m : r.mounts()) mounts[m.container_path()] = {m.host_path(), m.read_only()};
  EXPECT_EQ(mounts["/usr/local/libslice/libslice.so"], std::make_pair(dir_ + "/lib/libslice.so", true));
  EXPECT_EQ(mounts["/etc/ld.so.preload"], std::make_pair(dir_ + "/lib/ld.so.preload", true));
  EXPECT_EQ(mounts[coordinator()], std::make_pair(coordinator(), false));
  EXPECT_EQ(mounts[policies()], std::make_pair(policies(), true));
  EXPECT_EQ(r.cdi_devices_size(), 0);

  // The owner's policy, trusted as libslice reads it.
  slice::Policy policy;
  std::string message;
  ASSERT_EQ(slice::read_policy(policies(), tenant, policy, message), slice::PolicyStatus::ok) << message;
  ASSERT_TRUE(policy.per_gpu.contains(kGpu1));
  EXPECT_EQ(policy.per_gpu[kGpu1], slice::MemoryLimit::of_bytes(2 * kSliceBytes));
  EXPECT_EQ(policy.compute_share, 50u);
  // The whole policy: what an earlier or planted tenant file registered holds nothing, and a GPU
  // outside the allocation gets the smallest cap there is.
  EXPECT_EQ(policy.compute_limit, 100u);
  EXPECT_EQ(policy.priority, slice::Priority::normal);
  EXPECT_EQ(policy.memory, slice::MemoryLimit::of_bytes(1));
  struct stat st {};
  ASSERT_EQ(::stat((coordinator() + "/tenants/" + tenant).c_str(), &st), 0) << "tenant file adopted";
  EXPECT_EQ(st.st_uid, 0u);

  // Not a slice of this node, or one asked twice: refused.
  grpc::Status status;
  allocate({"GPU-00000000-0000-0000-0000-000000000000::0"}, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  allocate({kGpu0 + "::0", kGpu0 + "::0"}, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(DevicePluginTest, SpreadAllocationAndSingleGpuOnlyAndCdiNames) {
  start_plugin({"--single-gpu-only", "--device-list-strategy", "cdi"});
  grpc::Status status;
  allocate({kGpu0 + "::0", kGpu1 + "::0"}, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("--single-gpu-only"), std::string::npos);
  const auto r = allocate({kGpu0 + "::3"});
  ASSERT_EQ(r.cdi_devices_size(), 1);
  EXPECT_EQ(r.cdi_devices(0).name(), "nvidia.com/gpu=" + kGpu0);
  EXPECT_FALSE(r.envs().contains("NVIDIA_VISIBLE_DEVICES"));
}

TEST_F(DevicePluginTest, ContainerIsCappedAtItsSliceWhateverItsOwnEnvSays) {
  start_plugin();
  const auto r = allocate({kGpu0 + "::1"});
  const auto env = container_env(r);
  const std::string log = dir_ + "/load.log";
  EXPECT_EQ(run_load(env, kSliceBytes / kMiB, log), 0) << k8s_test::read_file(log);
  EXPECT_NE(run_load(env, kSliceBytes / kMiB + 1, log), 0) << "one MiB past the slice must be refused";
  EXPECT_NE(k8s_test::read_file(log).find("refused"), std::string::npos) << k8s_test::read_file(log);

  // Another container's own environment asks for 6 GiB, in every form, and its process is the
  // first of its tenant (so no registered limits of an earlier process hold): the owner's policy does.
  auto greedy = container_env(allocate({kGpu0 + "::2"}));
  greedy["SLICE_MEMORY_LIMIT"] = "6Gi";
  greedy["SLICE_MEMORY_LIMIT_0"] = "6Gi";
  greedy["SLICE_MEMORY_LIMIT_" + underscored(kGpu0)] = "6Gi";
  EXPECT_NE(run_load(greedy, kSliceBytes / kMiB + 1, log), 0) << k8s_test::read_file(log);
}

TEST_F(DevicePluginTest, AContainerGivenCard1Of2IsCappedOnCard1AndNowhereElse) {
  start_plugin();
  const auto r = allocate({kGpu1 + "::1"});
  // The container runtime shows the container its card alone (NVIDIA_VISIBLE_DEVICES): the driver
  // there numbers it 0, as CUDA_VISIBLE_DEVICES by UUID makes the simulated one do.
  auto env = container_env(r);
  env["CUDA_VISIBLE_DEVICES"] = r.envs().at("NVIDIA_VISIBLE_DEVICES");
  const std::string log = dir_ + "/card1.log";
  EXPECT_NE(run_load(env, kSliceBytes / kMiB + 1, log), 0) << "past its slice of card 1";
  const pid_t holder = k8s_test::spawn(
      {SIMGPU_LOAD_PATH, "--seconds", "20", "--kernel-us", "100", "--alloc-mib", std::to_string(kSliceBytes / kMiB)},
      env, log);
  ASSERT_TRUE(k8s_test::wait_for_text(log, "ready", 20s)) << k8s_test::read_file(log);
  // The driver's own account: the slice on card 1, nothing on card 0.
  const std::string stat_file = dir_ + "/stat.json";
  const pid_t stat = k8s_test::spawn({SIMGPU_STAT_PATH, "--json"}, simulator_env(), stat_file);
  EXPECT_EQ(k8s_test::wait_exit(stat, 20s), 0);
  const std::string json = k8s_test::read_file(stat_file);
  const auto card0 = json.find("\"uuid\":\"" + kGpu0 + "\"");
  const auto card1 = json.find("\"uuid\":\"" + kGpu1 + "\"");
  ASSERT_NE(card0, std::string::npos) << json;
  ASSERT_NE(card1, std::string::npos) << json;
  const auto used_after = [&](std::size_t at) { return json.substr(json.find("\"used_bytes\":", at), 40); };
  EXPECT_EQ(used_after(card1).find("\"used_bytes\":" + std::to_string(kSliceBytes)), 0u) << json;
  EXPECT_EQ(used_after(card0).find("\"used_bytes\":0,"), 0u) << json;
  ::kill(holder, SIGTERM);
  k8s_test::wait_exit(holder, 10s);
  // Where a runtime left card 0 in view as well, that card is not the container's to use.
  const auto both = container_env(r);
  EXPECT_NE(run_load(both, 1, dir_ + "/card0.log"), 0) << k8s_test::read_file(dir_ + "/card0.log");
}

TEST_F(DevicePluginTest, TwoContainersInPidNamespacesShareOneView) {
  if (std::system("unshare --pid --fork true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "unshare --pid --fork does not work here";
  start_plugin();
  std::vector<pid_t> containers;
  std::vector<std::string> tenants;
  for (const std::string& id : {kGpu0 + "::0", kGpu0 + "::2"}) {
    const auto r = allocate({id});
    tenants.push_back(r.envs().at("SLICE_TENANT"));
    const std::string log = dir_ + "/" + tenants.back() + ".log";
    containers.push_back(k8s_test::spawn({"unshare", "--pid", "--fork", "--kill-child", SIMGPU_LOAD_PATH, "--seconds",
                                          "30", "--kernel-us", "100", "--alloc-mib", "256"},
                                         container_env(r), log));
    ASSERT_TRUE(k8s_test::wait_for_text(log, "ready", 20s)) << k8s_test::read_file(log);
  }
  const std::string status_file = dir_ + "/status.json";
  const pid_t status =
      k8s_test::spawn({SLICECTL_PATH, "status", "--json", "--coordinator", coordinator()}, {}, status_file);
  EXPECT_EQ(k8s_test::wait_exit(status, 20s), 0);
  const std::string json = k8s_test::read_file(status_file);
  for (const std::string& t : tenants) {
    const auto at = json.find("\"name\":\"" + t + "\"");
    ASSERT_NE(at, std::string::npos) << t << " in " << json;
    // Its one process, with the 256 MiB it holds.
    EXPECT_NE(json.find("\"memory_used_bytes\":" + std::to_string(256 * kMiB), at), std::string::npos) << json;
  }
  // unshare --fork outlives a SIGTERM while its child runs; --kill-child takes the child with it.
  for (const pid_t pid : containers) {
    ::kill(pid, SIGKILL);
    k8s_test::wait_exit(pid, 10s);
  }
}

TEST_F(DevicePluginTest, LostGpuTurnsItsSlicesUnhealthy) {
  start_plugin();
  grpc::ClientContext context;
  deadline(context, 20s);
  auto stub = dial();
  auto reader = stub->ListAndWatch(&context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse response;
  ASSERT_TRUE(reader->Read(&response));
  const std::string marker = simgpu_state_ + ".lost-1";
  std::ofstream(marker).put('\n');
  ASSERT_TRUE(reader->Read(&response)) << "an update after GPU 1 was lost";
  std::filesystem::remove(marker);
  int unhealthy = 0;
  for (const auto& d : response.devices()) {
    const bool on_lost_gpu = d.id().starts_with(kGpu1);
    EXPECT_EQ(d.health(), on_lost_gpu ? "Unhealthy" : "Healthy") << d.id();
    unhealthy += d.health() == "Unhealthy";
  }
  EXPECT_EQ(unhealthy, 4);
  context.TryCancel();
}

TEST_F(DevicePluginTest, RegistersAgainWhenTheKubeletRestarts) {
  start_plugin();
  // A kubelet restart: its socket goes, the plugins' sockets are wiped, a new socket comes.
  kubelet_->stop();
  std::filesystem::remove(plugin_socket());
  kubelet_ = std::make_unique<FakeKubelet>(kubelet_socket());
  ASSERT_TRUE(kubelet_->start());
  const auto registrations = kubelet_->wait_for(1, 20s);
  ASSERT_EQ(registrations.size(), 1u) << k8s_test::read_file(dir_ + "/plugin.log");
  EXPECT_EQ(registrations[0].endpoint(), kSocketName);
  auto stub = dial();
  EXPECT_EQ(first_list(*stub).size(), 8u);
}

// Whoever may connect to the socket may Allocate slices: only its owner (the kubelet is root),
// whatever the umask the plugin was started with (issue 29: 0777 under umask 000).
TEST_F(DevicePluginTest, TheSocketIsItsOwnersAloneWhateverTheUmask) {
  const mode_t before = ::umask(0);
  start_plugin();
  ::umask(before);
  struct stat st {};
  ASSERT_EQ(stat(plugin_socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(DevicePluginTest, SigtermRemovesTheSocketAndLeavesNothing) {
  start_plugin();
  ASSERT_TRUE(std::filesystem::exists(plugin_socket()));
  ::kill(plugin_, SIGTERM);
  EXPECT_EQ(k8s_test::wait_exit(plugin_, 10s), 0) << k8s_test::read_file(dir_ + "/plugin.log");
  plugin_ = -1;
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/device-plugins"))
    left.push_back(entry.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"kubelet.sock"});
}

TEST(DevicePluginCommandLine, HelpAndWrongOptions) {
  const std::string out =
      std::string(std::getenv("SLICE_TEST_TMPDIR") ? std::getenv("SLICE_TEST_TMPDIR") : "/tmp") + "/cli.log";
  EXPECT_EQ(k8s_test::wait_exit(k8s_test::spawn({PLUGIN_PATH, "--help"}, {}, out), 10s), 0);
  const std::string help = k8s_test::read_file(out);
  for (const char* flag : {"--resource-name", "--slices", "--memory-reserve", "--device-plugin-dir", "--kubelet-socket",
                           "--device-list-strategy", "--single-gpu-only", "--coordinator-dir", "--tenant-group",
                           "--health-interval", "--list"})
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--slices", "0"},
                                              {"--slices", "101"},
                                              {"--bogus"},
                                              {"--memory-reserve", "12X"},
                                              {"--device-list-strategy", "x"},
                                              {"--coordinator-dir", "relative"},
                                              {"--slices"}}) {
    std::vector<std::string> argv = {PLUGIN_PATH};
    argv.insert(argv.end(), bad.begin(), bad.end());
    EXPECT_EQ(k8s_test::wait_exit(k8s_test::spawn(argv, {}, out), 10s), 2) << bad[0];
  }
}

}  // namespace
