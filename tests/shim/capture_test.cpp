// libslice against the driver's rules for stream capture and destroyed handles, on a simulated GPU
// that enforces them (tools/simgpu/capture.h): a query of a capturing stream or a captured event
// invalidates the capture, and any call libslice makes on a destroyed handle, or that breaks a
// capture, is reported by the simulator, which fails the test (tests/run_isolated.sh). The captures
// here happen with work still queued and the compute watcher running, with a share set and a busy
// neighbour, as in vLLM's and torch.compile's start-up; the streams come and go as in a server that
// makes one per request. Runs under LD_PRELOAD=libslice.so (CMake sets the environment).
#include <atomic>
#include <barrier>
#include <chrono>
#include <thread>

#include "shim_test_support.h"

namespace {

using namespace slice_test;
using namespace std::chrono_literals;

constexpr unsigned long long kUs = 1000, kMs = 1000 * kUs;

class Capture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDeviceGet(&device_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context_, device_), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
    spin_ = spin_kernel();
    ASSERT_NE(spin_, nullptr);
    // A busy neighbour of another tenant for the whole suite: the gate closes now and then, and the
    // watcher looks after this process's queues often.
    std::string out;
    neighbour_ = spawn_child("neighbour", {"SLICE_TENANT=neighbour", "SLICE_COMPUTE_SHARE=50"}, out);
    ASSERT_GT(neighbour_, 0);
    ASSERT_TRUE(wait_for_output(out, "busy")) << read_file(out);
  }
  static void TearDownTestSuite() {
    if (neighbour_ > 0) {
      kill(neighbour_, SIGTERM);
      wait_child(neighbour_);
    }
  }
  void SetUp() override { ASSERT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS); }

  // Queues `n` kernels of `ns` on `stream`: work the watcher will want to see finish.
  static void queue_work(CUstream stream, int n, unsigned long long ns) {
    for (int i = 0; i < n; ++i) CU_OK(launch_spin(spin_, ns, stream));
  }
  // Instantiates and replays a captured graph, and checks it ran.
  static void replay(CUgraph graph, CUstream stream, int times) {
    CUgraphExec exec = nullptr;
    CU_OK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    for (int i = 0; i < times; ++i) CU_OK(cuGraphLaunch(exec, stream));
    CU_OK(cuStreamSynchronize(stream));
    CU_OK(cuGraphExecDestroy(exec));
    CU_OK(cuGraphDestroy(graph));
  }

  static CUdevice device_;
  static CUcontext context_;
  static CUfunction spin_;
  static pid_t neighbour_;
};
CUdevice Capture::device_ = 0;
CUcontext Capture::context_ = nullptr;
CUfunction Capture::spin_ = nullptr;
pid_t Capture::neighbour_ = 0;

TEST_F(Capture, AStreamWithWorkStillQueuedIsCapturedWhileTheWatcherRuns) {
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  queue_work(stream, 10, kMs);  // still running when the capture begins
  CU_OK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < 20; ++i) {  // 20 launches over some 27 ms, as the review measured
    CU_OK(launch_spin(spin_, 100 * kUs, stream));
    std::this_thread::sleep_for(1350us);
  }
  CUgraph graph = nullptr;
  CU_OK(cuStreamEndCapture(stream, &graph));
  ASSERT_NE(graph, nullptr);
  replay(graph, stream, 3);
  CU_OK(cuStreamDestroy_v2(stream));
}

TEST_F(Capture, ThePerThreadDefaultStreamIsCapturedWhileTheWatcherRuns) {
  // Launches to the per-thread default stream are followed by an event libslice records and its
  // watcher queries: none may be recorded into, or queried during, the capture.
  for (int i = 0; i < 10; ++i) {
    unsigned long long ns = kMs;
    void* params[] = {&ns};
    CU_OK(cuLaunchKernel_ptsz(spin_, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  }
  CU_OK(cuStreamBeginCapture_v2_ptsz(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < 20; ++i) {
    unsigned long long ns = 100 * kUs;
    void* params[] = {&ns};
    CU_OK(cuLaunchKernel_ptsz(spin_, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
    std::this_thread::sleep_for(1ms);
  }
  CUgraph graph = nullptr;
  CU_OK(cuStreamEndCapture_ptsz(nullptr, &graph));
  ASSERT_NE(graph, nullptr);
  replay(graph, CU_STREAM_PER_THREAD, 2);
}

TEST_F(Capture, ThreeThreadsCaptureAHundredLaunchesBetweenThemAndReplayThem) {
  // Their captures overlap, in the global mode; nobody synchronises until all have ended (that
  // would break another thread's capture: a program's own rule, which the simulator also checks).
  std::atomic<int> failures{0};
  std::barrier captured(3);
  auto worker = [&](int launches) {
    CUstream stream = nullptr;
    if (cuCtxSetCurrent(context_) != CUDA_SUCCESS || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      ++failures;
      captured.arrive_and_drop();
      return;
    }
    for (int i = 0; i < 5; ++i) failures += launch_spin(spin_, kMs, stream) != CUDA_SUCCESS;  // warm-up
    failures += cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS;
    for (int i = 0; i < launches; ++i) {
      failures += launch_spin(spin_, 50 * kUs, stream) != CUDA_SUCCESS;
      if (i % 8 == 0) std::this_thread::sleep_for(500us);
    }
    CUgraph graph = nullptr;
    const CUresult ended = cuStreamEndCapture(stream, &graph);
    captured.arrive_and_wait();
    if (ended != CUDA_SUCCESS || graph == nullptr) {
      std::fprintf(stderr, "cuStreamEndCapture: %d\n", static_cast<int>(ended));
      ++failures;
      return;
    }
    CUgraphExec exec = nullptr;
    failures += cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS;
    for (int i = 0; i < 4; ++i) failures += cuGraphLaunch(exec, stream) != CUDA_SUCCESS;
    failures += cuStreamSynchronize(stream) != CUDA_SUCCESS;
    cuGraphExecDestroy(exec);
    cuGraphDestroy(graph);
    cuStreamDestroy_v2(stream);
  };
  std::thread a(worker, 34), b(worker, 33), c(worker, 33);
  a.join(), b.join(), c.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(Capture, AStreamThatJoinsTheCaptureThroughAnEventIsNeverQueried) {
  // Fork and join: libslice is told nothing when `side` joins, and `side` has work of its own queued.
  CUstream origin = nullptr, side = nullptr;
  CU_OK(cuStreamCreate(&origin, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  CUevent fork = nullptr, join = nullptr;
  CU_OK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  queue_work(side, 10, kMs);
  CU_OK(cuStreamBeginCapture_v2(origin, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU_OK(launch_spin(spin_, 100 * kUs, origin));
  CU_OK(cuEventRecord(fork, origin));
  CU_OK(cuStreamWaitEvent(side, fork, 0));  // `side` joins the capture here
  for (int i = 0; i < 10; ++i) {
    CU_OK(launch_spin(spin_, 100 * kUs, side));
    CU_OK(launch_spin(spin_, 100 * kUs, origin));
    std::this_thread::sleep_for(1ms);
  }
  CU_OK(cuEventRecord(join, side));
  CU_OK(cuStreamWaitEvent(origin, join, 0));
  CUgraph graph = nullptr;
  CU_OK(cuStreamEndCapture(origin, &graph));
  ASSERT_NE(graph, nullptr);
  replay(graph, origin, 2);
  CU_OK(cuEventDestroy_v2(fork));
  CU_OK(cuEventDestroy_v2(join));
  CU_OK(cuStreamDestroy_v2(origin));
  CU_OK(cuStreamDestroy_v2(side));
}

TEST_F(Capture, AServerThatMakesAStreamPerRequestLeavesNoDestroyedHandleToTheWatcher) {
  for (int request = 0; request < 300; ++request) {
    CUstream stream = nullptr;
    CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU_OK(launch_spin(spin_, 200 * kUs, stream));
    if (request % 3 == 0) {
      CU_OK(cuStreamSynchronize(stream));
    }
    CU_OK(cuStreamDestroy_v2(stream));  // often with its kernel still queued: legal
    if (request % 50 == 0) std::this_thread::sleep_for(2ms);
  }
  CU_OK(cuCtxSynchronize());
}

TEST_F(Capture, ContextsDestroyedWithWorkLeaveNoDestroyedHandleToTheWatcher) {
  for (int round = 0; round < 20; ++round) {
    CUcontext ctx = nullptr;
    CU_OK(cuCtxCreate_v2(&ctx, 0, device_));
    CUstream stream = nullptr;
    CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU_OK(launch_spin(spin_kernel(), 500 * kUs, stream));  // a module of this context
    unsigned long long ns = 500 * kUs;
    void* params[] = {&ns};
    CUfunction f = spin_kernel();
    CU_OK(cuLaunchKernel_ptsz(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));  // an event of libslice's
    std::this_thread::sleep_for(300us);
    CU_OK(cuCtxDestroy_v2(ctx));
    CU_OK(cuCtxSetCurrent(context_));
  }
}

TEST_F(Capture, ThePrimaryContextResetWithWorkQueuedLeavesNoDestroyedHandle) {
  // A child of its own: the suite's primary context must stay.
  std::string out;
  EXPECT_EQ(run_child("primary-reset", {}, &out), 0) << out;
}

TEST_F(Capture, DeprecatedLaunchesPassTheGate) {
  // Alone on the device with a 25% limit: ungated, cuLaunchGridAsync would run 1 ms kernels
  // back to back (about 1000 in a second).
  std::string out;
  EXPECT_EQ(run_child("legacy-launches", {"SLICE_TENANT=legacy", "SLICE_COMPUTE_LIMIT=25"}, &out), 0) << out;
}

// ---- children ----

int child_fail(const std::string& what) {
  std::printf("child failed: %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

int neighbour() {
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
    return child_fail("init");
  CUfunction f = spin_kernel();
  CUstream stream = nullptr;
  if (!f || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) return child_fail("setup");
  std::printf("busy\n");
  std::fflush(stdout);
  for (;;) {
    for (int i = 0; i < 4; ++i)
      if (launch_spin(f, kMs, stream)) return child_fail("launch");
    cuStreamSynchronize(stream);
  }
}

int primary_reset() {
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0)) return child_fail("init");
  for (int round = 0; round < 10; ++round) {
    if (cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return child_fail("retain");
    CUfunction f = spin_kernel();
    CUstream stream = nullptr;
    if (!f || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) return child_fail("setup");
    for (int i = 0; i < 4; ++i) launch_spin(f, 500 * kUs, stream);
    std::this_thread::sleep_for(200us);
    if (cuDevicePrimaryCtxReset_v2(dev)) return child_fail("reset");
  }
  return 0;
}

int legacy_launches() {
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
    return child_fail("init");
  CUfunction f = spin_kernel();
  CUstream stream = nullptr;
  if (!f || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) return child_fail("setup");
  unsigned long long ns = kMs;
  if (cuFuncSetBlockShape(f, 1, 1, 1) || cuParamSetSize(f, sizeof ns) || cuParamSetv(f, 0, &ns, sizeof ns))
    return child_fail("parameters");
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  while (std::chrono::steady_clock::now() - start < 1s) {
    for (int i = 0; i < 4; ++i)
      if (cuLaunchGridAsync(f, 1, 1, stream)) return child_fail("cuLaunchGridAsync");
    if (cuStreamSynchronize(stream)) return child_fail("sync");
    done += 4;
  }
  if (cuLaunch(f) || cuLaunchGrid(f, 1, 1) || cuCtxSynchronize()) return child_fail("cuLaunch, cuLaunchGrid");
  std::printf("%d kernels of 1 ms in a second\n", done);
  return done <= 450 ? 0 : child_fail("the 25% limit did not hold for cuLaunchGridAsync");
}

int child_main(const std::string& mode) {
  if (mode == "neighbour") return neighbour();
  if (mode == "primary-reset") return primary_reset();
  if (mode == "legacy-launches") return legacy_launches();
  return child_fail("unknown mode " + mode);
}

}  // namespace

int main(int argc, char** argv) { return slice_test::shim_test_main(argc, argv, child_main); }
