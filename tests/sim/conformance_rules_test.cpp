// Conformance of the simulated driver with the rules the real driver enforces by punishing misuse,
// written from the CUDA documentation (tools/simgpu/capture.h cites it): stream capture and its
// modes, invalidation, cross-stream capture, the legacy stream, destroyed handles; and the memory the
// driver holds for a process beyond its allocations (module globals, the heap, printf and stack
// limits), where managed memory lives, pools in host memory, pools whose idle memory is not reusable
// yet, child graphs with memory nodes, the deprecated launches. Every breach must both fail as the
// driver fails and be reported (tools/simgpu/violations.h): this program breaks the rules on
// purpose and reads the reports itself (SIMGPU_VIOLATIONS_EXPECTED=1).
//
// Linked directly against the simulated libcuda.so.1 and libnvidia-ml.so.1, no libslice.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "nvml_subset.h"
#include "violation_reports.h"

extern "C" {
nvmlReturn_t nvmlInit_v2();
nvmlReturn_t nvmlShutdown();
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_t* infos);
}

namespace {

constexpr std::size_t kMiB = 1 << 20;
constexpr unsigned long long kUs = 1000;

#define CU(call) ASSERT_EQ(CUDA_SUCCESS, (call)) << #call

using simgpu_test::take_reports;

class Rules : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(CUDA_SUCCESS, cuInit(0));
    ASSERT_EQ(CUDA_SUCCESS, cuDeviceGet(&dev_, 0));
  }
  void SetUp() override {
    CU(cuDevicePrimaryCtxRetain(&ctx_, dev_));
    CU(cuCtxSetCurrent(ctx_));
    static const char kPtx[] =
        ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry spin(.param .u64 spin_param_0) { ret; }\n";
    CU(cuModuleLoadData(&module_, kPtx));
    CU(cuModuleGetFunction(&spin_, module_, "spin"));
    CU(cuStreamCreate(&a_, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&b_, CU_STREAM_NON_BLOCKING));
    take_reports();
  }
  void TearDown() override {
    cuStreamDestroy_v2(a_);
    cuStreamDestroy_v2(b_);
    cuModuleUnload(module_);
    cuDevicePrimaryCtxRelease_v2(dev_);
    take_reports();
  }
  CUresult spin(CUstream s, unsigned long long ns = 100 * kUs) {
    void* params[] = {&ns};
    return cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, s, params, nullptr);
  }
  static std::size_t used() {
    std::size_t f = 0, t = 0;
    EXPECT_EQ(CUDA_SUCCESS, cuMemGetInfo_v2(&f, &t));
    return t - f;
  }
  static CUdevice dev_;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction spin_ = nullptr;
  CUstream a_ = nullptr, b_ = nullptr;
};
CUdevice Rules::dev_ = 0;

// ---- stream capture ----

TEST_F(Rules, QueryingACapturingStreamFailsAndInvalidatesTheCapture) {
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(spin(a_));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamQuery(a_));
  CUstreamCaptureStatus status;
  CU(cuStreamIsCapturing(a_, &status));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_INVALIDATED, status);
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, spin(a_)) << "an invalidated capture takes no more work";
  CUgraph graph = reinterpret_cast<CUgraph>(1);
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(a_, &graph));
  EXPECT_EQ(nullptr, graph);
  CU(cuStreamIsCapturing(a_, &status));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, status) << "ended all the same";
  EXPECT_NE(take_reports().find("cuStreamQuery: a query or synchronisation of a stream that is capturing"),
            std::string::npos);
}

TEST_F(Rules, SynchronisingACapturingStreamOrItsContextInvalidatesTheCapture) {
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_RELAXED));  // even a relaxed capture
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamSynchronize(a_));
  CUgraph graph = nullptr;
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(a_, &graph));
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuCtxSynchronize());
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(a_, &graph));
  const std::string reports = take_reports();
  EXPECT_NE(reports.find("cuStreamSynchronize:"), std::string::npos) << reports;
  EXPECT_NE(reports.find("cuCtxSynchronize: a synchronisation of a context"), std::string::npos) << reports;
}

TEST_F(Rules, QueryingACapturedEventInvalidatesTheCapture) {
  CUevent e = nullptr;
  CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(spin(a_));
  CU(cuEventRecord(e, a_));  // a captured event: stands for nodes, schedules nothing
  EXPECT_EQ(CUDA_ERROR_CAPTURED_EVENT, cuEventQuery(e));
  CUgraph graph = nullptr;
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(a_, &graph));
  CU(cuEventDestroy_v2(e));
  EXPECT_NE(take_reports().find("cuEventQuery: a query or synchronisation of an event recorded in a capture"),
            std::string::npos);
}

TEST_F(Rules, AGlobalCaptureProhibitsOtherThreadsUnsafeCallsUnlessTheyRelaxed) {
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUresult global = CUDA_SUCCESS, relaxed = CUDA_ERROR_UNKNOWN, thread_local_mode = CUDA_ERROR_UNKNOWN,
           query_relaxed = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    cuCtxSetCurrent(ctx_);  // not a potentially unsafe call
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CUdeviceptr p = 0;
    if (cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS) {
      relaxed = cuMemAlloc_v2(&p, kMiB);
      cuMemFree_v2(p);
      query_relaxed = cuStreamQuery(b_);
    }
    mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    cuThreadExchangeStreamCaptureMode(&mode);
    thread_local_mode = cuMemAlloc_v2(&p, kMiB);
    cuMemFree_v2(p);
  }).join();
  EXPECT_EQ(CUDA_SUCCESS, relaxed);
  EXPECT_EQ(CUDA_SUCCESS, query_relaxed) << "another stream, by a relaxed thread";
  EXPECT_EQ(CUDA_SUCCESS, thread_local_mode);
  CUgraph graph = nullptr;
  CU(cuStreamEndCapture(a_, &graph));
  CU(cuGraphDestroy(graph));
  EXPECT_EQ("", take_reports());

  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  std::thread([&] {
    cuCtxSetCurrent(ctx_);
    CUdeviceptr p = 0;
    global = cuMemAlloc_v2(&p, kMiB);  // the default mode: global
  }).join();
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, global);
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(a_, &graph));
  EXPECT_NE(take_reports().find("cuMemAlloc: a potentially unsafe call by a thread in the global capture mode while "
                                "another thread was capturing in the global mode"),
            std::string::npos);
}

TEST_F(Rules, AThreadLocalCaptureLeavesOtherThreadsAloneButNotItsOwn) {
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUresult other = CUDA_ERROR_UNKNOWN;
  std::thread([&] {
    cuCtxSetCurrent(ctx_);
    other = cuStreamQuery(b_);
  }).join();
  EXPECT_EQ(CUDA_SUCCESS, other);
  CUdeviceptr p = 0;
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuMemAlloc_v2(&p, kMiB)) << "its own capture is not relaxed";
  CUgraph graph = nullptr;
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(a_, &graph));
  EXPECT_NE(take_reports().find("while it was capturing itself"), std::string::npos);
}

TEST_F(Rules, TheLegacyStreamIsOffLimitsWhileABlockingStreamCaptures) {
  CUstream blocking = nullptr;
  CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  CU(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUstreamCaptureStatus status;
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cuStreamIsCapturing(CU_STREAM_LEGACY, &status));
  EXPECT_EQ("", take_reports()) << "asking is allowed, and invalidates nothing";
  CU(spin(blocking));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, spin(nullptr));
  CUgraph graph = nullptr;
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(blocking, &graph));
  EXPECT_NE(take_reports().find("the legacy stream was used"), std::string::npos);
  // A non-blocking stream's capture leaves the legacy stream usable.
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_RELAXED));
  CU(spin(nullptr));
  CU(cuStreamEndCapture(a_, &graph));
  CU(cuGraphDestroy(graph));
  CU(cuStreamDestroy_v2(blocking));
}

TEST_F(Rules, StreamsJoinThroughEventsAndMustJoinBack) {
  CUevent fork = nullptr, join = nullptr;
  CU(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CU(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  // Joined back: one graph with the work of both streams.
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(spin(a_));
  CU(cuEventRecord(fork, a_));
  CU(cuStreamWaitEvent(b_, fork, 0));
  CUstreamCaptureStatus status;
  CU(cuStreamIsCapturing(b_, &status));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, status) << "b joined";
  CU(spin(b_));
  CU(spin(a_));
  CU(cuEventRecord(join, b_));
  CU(cuStreamWaitEvent(a_, join, 0));
  CUgraph graph = nullptr;
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, cuStreamEndCapture(b_, &graph)) << "only the origin ends it";
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(a_, &graph));
  // Again, properly.
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(spin(a_));
  CU(cuEventRecord(fork, a_));
  CU(cuStreamWaitEvent(b_, fork, 0));
  CU(spin(b_));
  CU(cuEventRecord(join, b_));
  CU(cuStreamWaitEvent(a_, join, 0));
  CU(cuStreamEndCapture(a_, &graph));
  std::size_t n = 0;
  CU(cuGraphGetNodes(graph, nullptr, &n));
  EXPECT_EQ(2u, n);
  CU(cuStreamIsCapturing(b_, &status));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, status) << "every stream leaves the capture at its end";
  CU(cuGraphDestroy(graph));
  // Not joined back.
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuEventRecord(fork, a_));
  CU(cuStreamWaitEvent(b_, fork, 0));
  CU(spin(b_));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, cuStreamEndCapture(a_, &graph));
  // Waiting on ordinary work from inside a capture: isolation, unless external.
  CU(spin(b_));
  CU(cuEventRecord(join, b_));
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuStreamWaitEvent(a_, join, CU_EVENT_WAIT_EXTERNAL));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, cuStreamWaitEvent(a_, join, 0));
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(a_, &graph));
  CU(cuEventDestroy_v2(fork));
  CU(cuEventDestroy_v2(join));
  EXPECT_NE(take_reports().find("waited on an event recorded outside the capture"), std::string::npos);
}

TEST_F(Rules, OnlyTheThreadThatBeganANonRelaxedCaptureEndsIt) {
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUresult other = CUDA_SUCCESS;
  CUgraph graph = nullptr;
  std::thread([&] { other = cuStreamEndCapture(a_, &graph); }).join();
  EXPECT_EQ(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, other);
  CU(cuStreamEndCapture(a_, &graph));
  CU(cuGraphDestroy(graph));
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_RELAXED));
  std::thread([&] { other = cuStreamEndCapture(a_, &graph); }).join();
  EXPECT_EQ(CUDA_SUCCESS, other) << "a relaxed capture may end anywhere";
  CU(cuGraphDestroy(graph));
}

TEST_F(Rules, CapturedCopiesAndHostFunctionsRunWhenTheGraphRuns) {
  CUdeviceptr buffer = 0;
  CU(cuMemAlloc_v2(&buffer, 64));
  int source = 42, target = 0;
  CU(cuStreamBeginCapture_v2(a_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CU(cuMemcpyHtoDAsync_v2(buffer, &source, sizeof source, a_));
  CU(cuMemcpyDtoHAsync_v2(&target, buffer, sizeof target, a_));
  CUgraph graph = nullptr;
  CU(cuStreamEndCapture(a_, &graph));
  EXPECT_EQ(0, target) << "nothing ran during the capture";
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  CU(cuGraphLaunch(exec, a_));
  CU(cuStreamSynchronize(a_));
  EXPECT_EQ(42, target);
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  CU(cuMemFree_v2(buffer));
}

// ---- host functions ----

TEST_F(Rules, ACudaCallInsideAHostFunctionIsRefusedAndReported) {
  struct Seen {
    CUresult rc = CUDA_SUCCESS;
    bool ran = false;
  } seen;
  CU(cuLaunchHostFunc(
      a_,
      [](void* data) {
        auto* s = static_cast<Seen*>(data);
        int count = 0;
        s->rc = cuDeviceGetCount(&count);
        s->ran = true;
      },
      &seen));
  CU(cuStreamSynchronize(a_));
  EXPECT_TRUE(seen.ran);
  EXPECT_EQ(CUDA_ERROR_NOT_PERMITTED, seen.rc);
  const std::string reports = take_reports();
  EXPECT_NE(reports.find("inside a host function"), std::string::npos) << reports;
  int count = 0;
  CU(cuDeviceGetCount(&count));  // outside one, the same call is fine
  EXPECT_EQ(take_reports(), "");
}

// ---- destroyed handles ----

TEST_F(Rules, UsingADestroyedHandleFailsAndIsReported) {
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU(cuStreamDestroy_v2(s));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuStreamQuery(s));
  CUevent e = nullptr;
  CU(cuEventCreate(&e, 0));
  CU(cuEventDestroy_v2(e));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventQuery(e));
  CUcontext c = nullptr;
  CU(cuCtxCreate_v2(&c, 0, dev_));
  CU(cuCtxDestroy_v2(c));
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetCurrent(c));
  CU(cuCtxSetCurrent(ctx_));
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev_;
  CUmemoryPool pool = nullptr;
  CU(cuMemPoolCreate(&pool, &props));
  CU(cuMemPoolDestroy(pool));
  cuuint64_t value = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value));
  const std::string reports = take_reports();
  for (const char* kind : {"destroyed stream", "destroyed event", "destroyed context", "destroyed memory pool"})
    EXPECT_NE(reports.find(kind), std::string::npos) << kind << "\n" << reports;
}

// ---- memory the driver holds beyond allocations ----

TEST_F(Rules, LimitsAboveTheirDefaultsTakeDeviceMemoryAsNvmlShows) {
  const std::size_t before = used();
  CU(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, (8 + 64) * kMiB));
  EXPECT_EQ(before + 64 * kMiB, used());
  CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024 + 256));  // 256 bytes more for every resident thread
  EXPECT_EQ(before + 64 * kMiB + 256ull * 128 * 1536, used());
  ASSERT_EQ(NVML_SUCCESS, nvmlInit_v2());
  nvmlDevice_t nvml = nullptr;
  ASSERT_EQ(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &nvml));
  nvmlProcessInfo_t infos[16];
  unsigned count = 16;
  ASSERT_EQ(NVML_SUCCESS, nvmlDeviceGetComputeRunningProcesses_v3(nvml, &count, infos));
  bool found = false;
  for (unsigned i = 0; i < count; ++i) {
    if (infos[i].pid != static_cast<unsigned>(getpid())) continue;
    found = true;
    EXPECT_EQ(used(), infos[i].usedGpuMemory);
  }
  EXPECT_TRUE(found);
  nvmlShutdown();
  CU(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * kMiB));
  CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024));
  EXPECT_EQ(before, used());
}

TEST_F(Rules, ModuleGlobalsTakeDeviceMemoryUntilUnloaded) {
  const std::size_t before = used();
  static const char kPtx[] =
      ".version 8.0\n.target sm_80\n.address_size 64\n.visible .global .align 4 .b8 table[3000000];\n"
      ".visible .entry noop() { ret; }\n";
  CUmodule m = nullptr;
  CU(cuModuleLoadData(&m, kPtx));
  EXPECT_EQ(before + 4 * kMiB, used()) << "3 MB of globals, in whole 2 MiB chunks";
  CU(cuModuleUnload(m));
  EXPECT_EQ(before, used());
}

TEST_F(Rules, ManagedMemoryPlacedOnTheHostTakesNoDeviceMemory) {
  const std::size_t before = used();
  CUdeviceptr p = 0;
  CU(cuMemAllocManaged(&p, 64 * kMiB, CU_MEM_ATTACH_GLOBAL));
  EXPECT_EQ(before + 64 * kMiB, used());
  CUmemLocation host{};
  host.type = CU_MEM_LOCATION_TYPE_HOST;
  CU(cuMemAdvise_v2(p, 64 * kMiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
  EXPECT_EQ(before, used());
  CUmemLocation device{};
  device.type = CU_MEM_LOCATION_TYPE_DEVICE;
  device.id = dev_;
  CU(cuMemPrefetchAsync_v2(p, 32 * kMiB, device, 0, a_));
  EXPECT_EQ(before, used()) << "part of it moves nothing";
  CU(cuMemPrefetchAsync_v2(p, 64 * kMiB, device, 0, a_));
  EXPECT_EQ(before + 64 * kMiB, used());
  CU(cuMemFree_v2(p));
  EXPECT_EQ(before, used());
}

TEST_F(Rules, PoolsInHostMemoryTakeNoDeviceMemory) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemoryPool pool = nullptr;
  CU(cuMemPoolCreate(&pool, &props));
  const std::size_t before = used();
  CUdeviceptr p = 0;
  CU(cuMemAllocFromPoolAsync(&p, 256 * kMiB, pool, a_));
  EXPECT_EQ(before, used());
  CU(cuMemFreeAsync(p, a_));
  CU(cuStreamSynchronize(a_));
  CU(cuMemPoolDestroy(pool));
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemPoolCreate(&pool, &props)) << "not a location for a pool";
}

TEST_F(Rules, APoolGrowsWhenItsIdleMemoryIsStillPendingOnAnotherStream) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev_;
  CUmemoryPool pool = nullptr;
  CU(cuMemPoolCreate(&pool, &props));
  CUdeviceptr p = 0, q = 0;
  CU(spin(a_, 20'000 * kUs));  // a_ is busy for 20 ms: the free below waits behind it
  CU(cuMemAllocFromPoolAsync(&p, 64 * kMiB, pool, a_));
  CU(cuMemFreeAsync(p, a_));
  cuuint64_t reserved = 0, in_use = 0;
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &in_use));
  EXPECT_EQ(64 * kMiB, reserved);
  EXPECT_EQ(0u, in_use) << "freed, in API order";
  CU(cuMemAllocFromPoolAsync(&q, 64 * kMiB, pool, b_));  // another stream cannot reuse it yet
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(128 * kMiB, reserved);
  CU(cuMemFreeAsync(q, b_));
  CU(cuMemAllocFromPoolAsync(&q, 64 * kMiB, pool, b_));  // the same stream may
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(128 * kMiB, reserved);
  CU(cuMemFreeAsync(q, b_));
  CU(cuStreamSynchronize(a_));
  CU(cuStreamSynchronize(b_));
  CU(cuMemAllocFromPoolAsync(&q, 128 * kMiB, pool, b_));  // all of it reusable once the frees ran
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(128 * kMiB, reserved);
  CU(cuMemFreeAsync(q, b_));
  CU(cuStreamSynchronize(b_));
  CU(cuMemPoolDestroy(pool));
}

// ---- graphs ----

TEST_F(Rules, AChildGraphMovedInBringsItsMemoryNodes) {
  CUgraph child = nullptr, parent = nullptr;
  CU(cuGraphCreate(&child, 0));
  CU(cuGraphCreate(&parent, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.poolProps.location.id = dev_;
  alloc.bytesize = 32 * kMiB;
  CUgraphNode a = nullptr, f = nullptr;
  CU(cuGraphAddMemAllocNode(&a, child, nullptr, 0, &alloc));
  CU(cuGraphAddMemFreeNode(&f, child, &a, 1, alloc.dptr));
  CUgraphNode node = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphAddChildGraphNode(&node, parent, nullptr, 0, child))
      << "a clone may hold no memory nodes";
  CUgraphNodeParams params{};
  params.type = CU_GRAPH_NODE_TYPE_GRAPH;
  params.graph.graph = child;
  params.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
  CU(cuGraphAddNode(&node, parent, nullptr, 0, &params));
  CUgraph owned = nullptr;
  CU(cuGraphChildGraphNodeGetGraph(node, &owned));
  EXPECT_EQ(child, owned);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(child)) << "it lives and dies with its parent";
  const std::size_t before = used();
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiateWithFlags(&exec, parent, 0));
  EXPECT_EQ(before, used()) << "mapped at the first launch";
  CU(cuGraphLaunch(exec, a_));
  CU(cuStreamSynchronize(a_));
  EXPECT_EQ(before + 32 * kMiB, used());
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(parent));
  CU(cuDeviceGraphMemTrim(dev_));
  EXPECT_EQ(before, used());
}

TEST_F(Rules, TheDeprecatedLaunchesRunKernels) {
  unsigned long long ns = 2000 * kUs;
  CU(cuFuncSetBlockShape(spin_, 32, 1, 1));
  CU(cuParamSetSize(spin_, sizeof ns));
  CU(cuParamSetv(spin_, 0, &ns, sizeof ns));
  CUevent start = nullptr, end = nullptr;
  CU(cuEventCreate(&start, 0));
  CU(cuEventCreate(&end, 0));
  CU(cuEventRecord(start, a_));
  CU(cuLaunchGridAsync(spin_, 1, 1, a_));
  CU(cuEventRecord(end, a_));
  CU(cuEventSynchronize(end));
  float ms = 0;
  CU(cuEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 1.9f) << "the kernel ran for its parameter";
  CU(cuLaunch(spin_));
  CU(cuLaunchGrid(spin_, 2, 1));
  CUDA_LAUNCH_PARAMS one{};
  one.function = spin_;
  one.gridDimX = one.gridDimY = one.gridDimZ = one.blockDimX = one.blockDimY = one.blockDimZ = 1;
  one.hStream = a_;
  void* params[] = {&ns};
  one.kernelParams = params;
  CU(cuLaunchCooperativeKernelMultiDevice(&one, 1, 0));
  CU(cuCtxSynchronize());
  CU(cuEventDestroy_v2(start));
  CU(cuEventDestroy_v2(end));
}

}  // namespace
