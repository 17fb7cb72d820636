// Framework-shaped workloads (tests/shim/workloads.h) run twice on the same simulated 8 GiB GPU,
// beside a busy neighbour of another tenant: once without libslice, once under it with a 2 GiB cap
// and a 50% share. They must behave the same way, except that under libslice the cap holds (checked
// against the driver's own figure) and the program is told its slice. Any call libslice made that
// the real driver would punish fails the test (tests/run_isolated.sh).
#include <map>

#include "shim_test_support.h"
#include "workloads.h"

namespace {

using namespace slice_test;
using Findings = std::map<std::string, unsigned long long>;

constexpr unsigned long long kCap = 2048 * kMiB;

Findings parse(const std::string& out) {
  Findings f;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t eq = line.find('=');
    if (eq != std::string::npos && eq > 0 && line.find(' ') == std::string::npos)
      f[line.substr(0, eq)] = std::stoull(line.substr(eq + 1));
  }
  return f;
}

class Workloads : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string out;
    neighbour_ = spawn_child("neighbour", {"SLICE_TENANT=neighbour", "SLICE_COMPUTE_SHARE=50"}, out);
    ASSERT_GT(neighbour_, 0);
    ASSERT_TRUE(wait_for_output(out, "busy")) << read_file(out);
  }
  static void TearDownTestSuite() {
    if (neighbour_ <= 0) return;
    kill(neighbour_, SIGTERM);
    wait_child(neighbour_);
  }
  // The workload without libslice and under it; both must complete.
  void run(const std::string& name, const std::vector<std::string>& env = {}) {
    std::vector<std::string> plain_env = env, sliced_env = env;
    plain_env.push_back("LD_PRELOAD=");
    for (const char* e : {"SLICE_MEMORY_LIMIT=2Gi", "SLICE_TENANT=framework", "SLICE_COMPUTE_SHARE=50"})
      sliced_env.push_back(e);
    std::string out;
    ASSERT_EQ(run_child("workload:" + name, plain_env, &out), 0) << out;
    plain_ = parse(out);
    ASSERT_EQ(run_child("workload:" + name, sliced_env, &out), 0) << out;
    sliced_ = parse(out);
    sliced_out_ = out;
  }
  // A finding both runs must share.
  void same(const std::string& key) {
    ASSERT_TRUE(plain_.count(key) && sliced_.count(key)) << key << "\n" << sliced_out_;
    EXPECT_EQ(plain_[key], sliced_[key]) << key;
  }
  Findings plain_, sliced_;
  std::string sliced_out_;
  static pid_t neighbour_;
};
pid_t Workloads::neighbour_ = 0;

TEST_F(Workloads, ACachingAllocatorHitsTheCapReleasesItsCacheAndGoesOn) {
  for (const bool expandable : {false, true}) {
    SCOPED_TRACE(expandable ? "expandable segments" : "segments");
    run("caching-allocator", expandable ? std::vector<std::string>{"EXPANDABLE=1"} : std::vector<std::string>{});
    same("out_of_memory");
    same("recovered");
    EXPECT_EQ(sliced_["out_of_memory"], 1u);
    EXPECT_EQ(sliced_["recovered"], 1u) << "after empty_cache it runs on at the batch that fitted";
    EXPECT_LE(sliced_["peak_device_bytes"], kCap) << "the cap held";
    EXPECT_GE(sliced_["max_batch"], 10u) << "the cap was usable: 160 MiB a sample, 2 GiB in all";
    EXPECT_GT(plain_["max_batch"], sliced_["max_batch"]);
    EXPECT_EQ(sliced_["left_bytes"], 0u);
  }
}

TEST_F(Workloads, AVllmStartUpSizesItsKvCacheToTheSliceCapturesAndSleeps) {
  run("vllm");
  EXPECT_EQ(plain_["total_seen"], 8192 * kMiB);
  EXPECT_EQ(sliced_["total_seen"], kCap) << "the slice is the card it sees";
  // 90% of what each sees, in whole 64 MiB chunks (coarse on a 2 GiB slice).
  EXPECT_NEAR(static_cast<double>(plain_["kv_percent_of_total"]), 89.5, 1.5);
  EXPECT_NEAR(static_cast<double>(sliced_["kv_percent_of_total"]), 89.5, 1.5);
  same("graphs_captured");
  same("graph_replays");
  same("woke");
  EXPECT_EQ(sliced_["graphs_captured"], 6u);
  EXPECT_EQ(sliced_["graph_replays"], 18u);
  for (Findings* f : {&plain_, &sliced_}) {
    const unsigned long long kv = (*f)["kv_chunks"] * 64 * kMiB;
    EXPECT_EQ((*f)["asleep_bytes"] + kv, (*f)["device_bytes_after_kv"]) << "sleep mode gave the KV cache back";
    EXPECT_EQ((*f)["awake_bytes"], (*f)["device_bytes_after_kv"]) << "and waking took it again";
  }
  EXPECT_LE(sliced_["device_bytes_after_kv"], kCap);
}

TEST_F(Workloads, StreamOrderedPoolsWithGraphsAndTrimsStayWithinTheCap) {
  run("async-pools");
  same("served");
  same("graph_launches");
  same("recovered");
  EXPECT_EQ(sliced_["graph_launches"], 5u);
  EXPECT_EQ(sliced_["recovered"], 1u);
  EXPECT_EQ(sliced_["bytes_after_trims"], 0u);
  EXPECT_LE(sliced_["filled_bytes"], kCap);
  EXPECT_LE(sliced_["peak_device_bytes"], kCap);
  EXPECT_GT(plain_["filled_bytes"], 2 * kCap);
}

TEST_F(Workloads, NcclStyleBuffersSharedByFileDescriptorAreChargedOnce) {
  run("nccl-vmm");
  same("peer_exit");
  same("peer_wrote");
  EXPECT_EQ(sliced_["peer_exit"], 0u);
  EXPECT_EQ(sliced_["peer_wrote"], 9u);
  EXPECT_EQ(sliced_["device_bytes"], 256 * kMiB);
  EXPECT_EQ(sliced_["peer_sees_used"], 256 * kMiB) << "the peer of the same tenant sees the buffer once";
}

TEST_F(Workloads, AServerWithAStreamPerRequestServesEveryRequest) {
  run("stream-per-request");
  same("served");
  EXPECT_EQ(sliced_["served"], 400u);
}

int neighbour() {
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
  CUfunction f = spin_kernel();
  CUstream stream = nullptr;
  if (!f || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) return 1;
  std::printf("busy\n");
  std::fflush(stdout);
  for (;;) {
    for (int i = 0; i < 4; ++i) launch_spin(f, 1'000'000, stream);
    cuStreamSynchronize(stream);
  }
}

int child_main(const std::string& mode) {
  if (mode == "neighbour") return neighbour();
  if (mode.rfind("workload:", 0) == 0) return run_workload(mode.substr(9));
  return 1;
}

}  // namespace

int main(int argc, char** argv) { return slice_test::shim_test_main(argc, argv, child_main); }
