// libslice's memory accounting on the simulated GPU: this test runs under LD_PRELOAD=libslice.so
// with SLICE_MEMORY_LIMIT=1Gi on an 8 GiB device (CMake sets the environment), so every refusal
// below is libslice's, not the device's. Every allocation path is filled to the cap exactly, freed,
// and filled again; the reports (cuMemGetInfo, cuDeviceTotalMem, NVML) must show the slice.
// Child processes (this program again, with --child MODE) cover a second member of the tenant, the
// exported tenant name and failing closed.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator_view.h"
#include "nvml_api.h"
#include "shim_test_support.h"
#include "slice/slice.h"

namespace {

using namespace slice_test;

constexpr std::uint64_t kCap = 1024 * kMiB;

// A graph with one allocation node per (device, bytes), each freed by a free node after it.
CUresult make_alloc_graph(const std::vector<std::pair<int, std::size_t>>& allocations, CUgraph* out) {
  CUgraph graph = nullptr;
  if (const CUresult rc = cuGraphCreate(&graph, 0)) return rc;
  for (const auto& [device, bytes] : allocations) {
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params.poolProps.location.id = device;
    params.bytesize = bytes;
    CUgraphNode alloc = nullptr, free_node = nullptr;
    CUresult rc = cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params);
    if (rc == CUDA_SUCCESS) rc = cuGraphAddMemFreeNode(&free_node, graph, &alloc, 1, params.dptr);
    if (rc != CUDA_SUCCESS) {
      cuGraphDestroy(graph);
      return rc;
    }
  }
  *out = graph;
  return CUDA_SUCCESS;
}

class Accounting : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDeviceGet(&device_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context_, device_), CUDA_SUCCESS);
  }
  void SetUp() override {
    ASSERT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
    const MemInfo m = mem_info();
    ASSERT_EQ(m.total, kCap);
    ASSERT_EQ(m.free, kCap) << "a previous test left memory charged";
  }
  static CUdevice device_;
  static CUcontext context_;
};
CUdevice Accounting::device_ = 0;
CUcontext Accounting::context_ = nullptr;

TEST_F(Accounting, MemAllocRefusedExactlyAtTheCapAndAgainAfterAFree) {
  const std::string log_before = read_file(g_log);
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 4; ++i) {
    CUdeviceptr p = 0;
    CU_OK(cuMemAlloc_v2(&p, 256 * kMiB));
    blocks.push_back(p);
  }
  EXPECT_EQ(mem_info().free, 0u);
  CUdeviceptr extra = 0;
  EXPECT_EQ(cuMemAlloc_v2(&extra, 1), CUDA_ERROR_OUT_OF_MEMORY);  // one byte past the cap
  const std::string log = read_file(g_log).substr(log_before.size());
  EXPECT_EQ(count_lines(log, " warn: "), 1) << log;
  EXPECT_NE(log.find("tenant 'acct' GPU 0 (GPU-"), std::string::npos) << log;
  EXPECT_NE(log.find("cuMemAlloc of 1 B"), std::string::npos) << log;
  EXPECT_NE(log.find("usage 1.0 GiB of cap 1.0 GiB"), std::string::npos) << log;
  CU_OK(cuMemFree_v2(blocks.back()));
  blocks.pop_back();
  EXPECT_EQ(mem_info().free, 256 * kMiB);
  CU_OK(cuMemAlloc_v2(&extra, 256 * kMiB));
  blocks.push_back(extra);
  for (CUdeviceptr p : blocks) CU_OK(cuMemFree_v2(p));
}

TEST_F(Accounting, AProgramLearnsItsSliceThroughSliceH) {
  // As a program does (include/slice/slice.h): looked up at run time, so that it runs without
  // libslice too.
  const auto get = reinterpret_cast<slice_get_info_fn>(dlsym(RTLD_DEFAULT, "slice_get_info"));
  const auto version = reinterpret_cast<slice_version_fn>(dlsym(RTLD_DEFAULT, "slice_version"));
  ASSERT_NE(get, nullptr);
  ASSERT_NE(version, nullptr);
  EXPECT_STRNE(version(), "");
  slice_info info{};
  info.size = sizeof info;
  ASSERT_EQ(get(0, &info), SLICE_OK);
  EXPECT_STREQ(info.tenant, "acct");
  EXPECT_EQ(info.memory_limit, kCap);
  EXPECT_EQ(info.memory_used, 0u);
  EXPECT_EQ(info.compute_share, 100u);
  EXPECT_EQ(info.compute_limit, 100u);
  EXPECT_EQ(info.priority, 1);
  CUdeviceptr p = 0;
  CU_OK(cuMemAlloc_v2(&p, 64 * kMiB));
  ASSERT_EQ(get(0, &info), SLICE_OK);
  EXPECT_EQ(info.memory_used, 64 * kMiB);
  EXPECT_EQ(info.memory_mine, 64 * kMiB);
  CU_OK(cuMemFree_v2(p));
  ASSERT_EQ(get(0, &info), SLICE_OK);
  EXPECT_EQ(info.memory_used, 0u);
  // What it cannot answer, it says: with libslice disabled (expect-uncapped), bad arguments.
  std::string out;
  EXPECT_EQ(run_child("expect-uncapped", {"SLICE_DISABLE=1"}, &out), 0) << out;
  EXPECT_EQ(get(0, nullptr), SLICE_ERROR_ARGUMENT);
  slice_info small{};
  small.size = 8;
  EXPECT_EQ(get(0, &small), SLICE_ERROR_ARGUMENT);
  EXPECT_EQ(get(-1, &info), SLICE_ERROR_DEVICE);
  EXPECT_EQ(get(64, &info), SLICE_ERROR_DEVICE);
}

TEST_F(Accounting, AtDebugARefusalAlsoShowsWhereItCameFrom) {
  std::string out;
  EXPECT_EQ(run_child("fill", {"SLICE_TENANT=debug", "SLICE_LOG_LEVEL=debug", "SLICE_LOG_FILE="}, &out), 0) << out;
  EXPECT_EQ(count_lines(out, " warn: "), 1) << out;
  EXPECT_NE(out.find(" debug: refused at:"), std::string::npos) << out;
  EXPECT_NE(out.find("shim_accounting_test("), std::string::npos) << "the caller's frames: " << out;
}

TEST_F(Accounting, AFailedDriverCallGivesTheChargeBack) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAllocPitch_v2(&p, nullptr, 1024, 1024, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(0x1234), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(mem_info().free, kCap);
}

TEST_F(Accounting, PitchChargesThePitchTimesTheHeight) {
  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  CU_OK(cuMemAllocPitch_v2(&p, &pitch, 4000, 1000, 4));
  EXPECT_GT(pitch, 4000u);
  EXPECT_EQ(mem_info().free, kCap - pitch * 1000);
  CU_OK(cuMemFree_v2(p));
  // Fits by width x height but not by pitch x height: refused.
  CUdeviceptr taken = 0;
  CU_OK(cuMemAlloc_v2(&taken, kMiB + 1));  // leaves 1023 MiB - 1 byte
  CUdeviceptr big = 0;
  EXPECT_EQ(cuMemAllocPitch_v2(&big, &pitch, kMiB - 511, 1023, 4), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemFree_v2(taken));
  CU_OK(cuMemAllocPitch_v2(&big, &pitch, kMiB - 511, 1023, 4));  // and fits once there is room
  EXPECT_EQ(mem_info().free, kCap - pitch * 1023);
  CU_OK(cuMemFree_v2(big));
}

TEST_F(Accounting, ManagedMemoryIsCharged) {
  CUdeviceptr p = 0;
  CU_OK(cuMemAllocManaged(&p, 768 * kMiB, CU_MEM_ATTACH_GLOBAL));
  EXPECT_EQ(mem_info().free, 256 * kMiB);
  CUdeviceptr q = 0;
  EXPECT_EQ(cuMemAllocManaged(&q, 512 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemFree_v2(p));
}

TEST_F(Accounting, HostMemoryIsNotCharged) {
  void* host = nullptr;
  CU_OK(cuMemAllocHost_v2(&host, 2 * kCap));
  EXPECT_EQ(mem_info().free, kCap);
  CU_OK(cuMemFreeHost(host));
}

TEST_F(Accounting, PoolMemoryStaysChargedUntilThePoolGivesItBack) {
  CUmemoryPool pool = nullptr;
  CU_OK(cuDeviceGetDefaultMemPool(&pool, device_));
  cuuint64_t keep_all = ~0ull;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0;
  CU_OK(cuMemAllocAsync(&a, 512 * kMiB, stream));
  CU_OK(cuMemAllocAsync(&b, 512 * kMiB, stream));
  EXPECT_EQ(mem_info().free, 0u);
  CUdeviceptr c = 0;
  EXPECT_EQ(cuMemAllocAsync(&c, 2 * kMiB, stream), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemFreeAsync(a, stream));
  CU_OK(cuStreamSynchronize(stream));
  // The pool keeps what was freed (release threshold: everything): still in use, still charged...
  EXPECT_EQ(mem_info().free, 0u);
  CUdeviceptr plain = 0;
  EXPECT_EQ(cuMemAlloc_v2(&plain, 2 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  // ...but the pool can hand it out again without growing.
  CU_OK(cuMemAllocAsync(&c, 512 * kMiB, stream));
  CU_OK(cuMemFreeAsync(c, stream));
  CU_OK(cuMemFreeAsync(b, stream));
  CU_OK(cuStreamSynchronize(stream));
  EXPECT_EQ(mem_info().free, 0u);
  CU_OK(cuMemPoolTrimTo(pool, 0));  // given back: the charge follows
  EXPECT_EQ(mem_info().free, kCap);
  // Release threshold 0: the pool gives memory back at the next synchronisation.
  cuuint64_t keep_none = 0;
  CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_none));
  CU_OK(cuMemAllocAsync(&a, 1000 * kMiB, stream));
  CU_OK(cuMemFreeAsync(a, stream));
  CU_OK(cuStreamSynchronize(stream));
  EXPECT_EQ(mem_info().free, kCap);
  CU_OK(cuMemAlloc_v2(&plain, kCap));  // and the whole cap is usable again
  CU_OK(cuMemFree_v2(plain));
  CU_OK(cuStreamDestroy_v2(stream));
}

TEST_F(Accounting, ExplicitPoolsAreChargedAndDestroyGivesBack) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device_;
  CUmemoryPool pool = nullptr;
  CU_OK(cuMemPoolCreate(&pool, &props));
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0;
  CU_OK(cuMemAllocFromPoolAsync(&a, 768 * kMiB, pool, stream));
  EXPECT_EQ(mem_info().free, 256 * kMiB);
  CUdeviceptr b = 0;
  EXPECT_EQ(cuMemAllocFromPoolAsync(&b, 512 * kMiB, pool, stream), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemFreeAsync(a, stream));
  CU_OK(cuStreamSynchronize(stream));
  CU_OK(cuMemPoolDestroy(pool));
  EXPECT_EQ(mem_info().free, kCap);
  CU_OK(cuStreamDestroy_v2(stream));
}

TEST_F(Accounting, VmmIsChargedUntilReleasedAndUnmapped) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  std::size_t granularity = 0;
  CU_OK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const std::size_t half = kCap / 2;
  ASSERT_EQ(half % granularity, 0u);
  CUmemGenericAllocationHandle h1 = 0, h2 = 0, h3 = 0;
  CU_OK(cuMemCreate(&h1, half, &prop, 0));
  CU_OK(cuMemCreate(&h2, half, &prop, 0));
  EXPECT_EQ(cuMemCreate(&h3, granularity, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  // Map h1, then release it: the driver keeps the memory while it is mapped, and so does the charge.
  CUdeviceptr va = 0;
  CU_OK(cuMemAddressReserve(&va, half, 0, 0, 0));
  CU_OK(cuMemMap(va, half, 0, h1, 0));
  CU_OK(cuMemRelease(h1));
  EXPECT_EQ(mem_info().free, 0u);
  EXPECT_EQ(cuMemCreate(&h3, granularity, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuMemUnmap(va, half));
  EXPECT_EQ(mem_info().free, half);
  CU_OK(cuMemAddressFree(va, half));
  CU_OK(cuMemRelease(h2));
  EXPECT_EQ(mem_info().free, kCap);
  // Host memory through VMM is not VRAM.
  CUmemAllocationProp host = prop;
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  host.location.id = 0;
  CUmemGenericAllocationHandle hh = 0;
  if (cuMemCreate(&hh, 2 * kCap, &host, 0) == CUDA_SUCCESS) {
    EXPECT_EQ(mem_info().free, kCap);
    CU_OK(cuMemRelease(hh));
  }
}

TEST_F(Accounting, ArraysLayeredArraysAndMipmapsAreCharged) {
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = 8192;  // 8192 x float = 32 KiB rows, no padding
  d.Height = 8192;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 1;
  std::vector<CUarray> arrays(4);
  for (CUarray& a : arrays) CU_OK(cuArrayCreate_v2(&a, &d));  // 4 x 256 MiB
  EXPECT_EQ(mem_info().free, 0u);
  CUarray more = nullptr;
  d.Height = 1;
  EXPECT_EQ(cuArrayCreate_v2(&more, &d), CUDA_ERROR_OUT_OF_MEMORY);
  for (CUarray a : arrays) CU_OK(cuArrayDestroy(a));
  EXPECT_EQ(mem_info().free, kCap);

  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 1000;  // 4000-byte rows pad to 4096
  d3.Height = 1024;
  d3.Depth = 64;
  d3.Format = CU_AD_FORMAT_FLOAT;
  d3.NumChannels = 1;
  d3.Flags = CUDA_ARRAY3D_LAYERED;
  CUarray layered = nullptr;
  CU_OK(cuArray3DCreate_v2(&layered, &d3));
  EXPECT_EQ(mem_info().free, kCap - 4096ull * 1024 * 64);
  CUmipmappedArray mip = nullptr;
  d3.Flags = 0;
  d3.Depth = 0;
  d3.Width = 4096;  // levels: 16 MiB + 4 MiB + 1 MiB
  d3.Height = 1024;
  CU_OK(cuMipmappedArrayCreate(&mip, &d3, 3));
  EXPECT_EQ(mem_info().free, kCap - 4096ull * 1024 * 64 - 21 * kMiB);
  CU_OK(cuArrayDestroy(layered));
  CU_OK(cuMipmappedArrayDestroy(mip));
  EXPECT_EQ(mem_info().free, kCap);
  d3.Width = 16384;  // 64 KiB rows x 16384 = 1 GiB for level 0 alone, plus the others: refused
  d3.Height = 16384;
  EXPECT_EQ(cuMipmappedArrayCreate(&mip, &d3, 2), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(Accounting, ReportsShowTheSlice) {
  std::size_t total = 0;
  CU_OK(cuDeviceTotalMem_v2(&total, device_));
  EXPECT_EQ(total, kCap);
  CUdeviceptr p = 0;
  CU_OK(cuMemAlloc_v2(&p, 100 * kMiB));
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  // The same GPU through NVML, found by its UUID.
  CUuuid cu_uuid;
  CU_OK(cuDeviceGetUuid_v2(&cu_uuid, device_));
  char uuid[64];
  const auto* u = reinterpret_cast<const unsigned char*>(cu_uuid.bytes);
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  nvmlDevice_t nvml_device = nullptr;
  ASSERT_EQ(nvmlDeviceGetHandleByUUID(uuid, &nvml_device), NVML_SUCCESS) << uuid;
  nvmlMemory_t v1{};
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(nvml_device, &v1), NVML_SUCCESS);
  EXPECT_EQ(v1.total, kCap);
  EXPECT_EQ(v1.free, kCap - 100 * kMiB);
  EXPECT_EQ(v1.used, 100 * kMiB);
  nvmlMemory_v2_t v2{};
  v2.version = nvmlMemory_v2;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo_v2(nvml_device, &v2), NVML_SUCCESS);
  EXPECT_EQ(v2.total, kCap);
  EXPECT_EQ(v2.free, kCap - 100 * kMiB);
  EXPECT_EQ(v2.used + v2.reserved + v2.free, v2.total);
  // Running processes: this one (a member of the tenant), not a live process of another tenant.
  std::string out_path;
  const pid_t other = spawn_child("hold-other-tenant", {"SLICE_TENANT=other"}, out_path);
  ASSERT_GT(other, 0);
  for (int i = 0; i < 500 && read_file(out_path).find("ready") == std::string::npos; ++i) usleep(10000);
  ASSERT_NE(read_file(out_path).find("ready"), std::string::npos) << read_file(out_path);
  nvmlProcessInfo_t infos[16];
  unsigned n = 16;
  const nvmlReturn_t listed = nvmlDeviceGetComputeRunningProcesses_v3(nvml_device, &n, infos);
  kill(other, SIGKILL);
  wait_child(other);
  ASSERT_EQ(listed, NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(infos[0].pid, static_cast<unsigned>(getpid()));
  // Asking with no room gives the tenant's count, not the device's.
  n = 0;
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(nvml_device, &n, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, 1u);
  CU_OK(cuMemFree_v2(p));
}

TEST_F(Accounting, ASecondProcessOfTheTenantSharesTheCap) {
  CUdeviceptr p = 0;
  CU_OK(cuMemAlloc_v2(&p, 768 * kMiB));
  std::string out;
  EXPECT_EQ(run_child("fill", {}, &out), 0) << out;
  EXPECT_NE(out.find("allocated 256 MiB"), std::string::npos) << out;  // the rest of the cap, not 1 GiB
  // It exited normally: its memory and its slot are given back at once, not left to a recount.
  std::string error;
  for (const slice::TenantView& t :
       slice::read_coordinator(slice_test::coordinator_dir(), slice_test::policy_dir(), error)) {
    if (t.name != "acct") continue;
    EXPECT_EQ(t.dead_processes, 0);
    ASSERT_EQ(t.processes.size(), 1u);
    EXPECT_EQ(t.gpus.at(0).used_bytes, 768 * kMiB);
  }
  CU_OK(cuMemFree_v2(p));
}

TEST_F(Accounting, ProcessesRacingToTheCapTogetherStopExactlyAtIt) {
  // Each holds what it got until all have stopped (a process that exits gives its memory back, and
  // the next may then rightly take it).
  const std::string release = std::string(std::getenv("SLICE_TEST_TMPDIR")) + "/release-racers";
  std::string paths[3];
  pid_t pids[3];
  for (int i = 0; i < 3; ++i)
    pids[i] = spawn_child("fill-and-hold", {"SLICE_TENANT=race", "RELEASE_FILE=" + release}, paths[i]);
  std::uint64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    for (int t = 0; t < 1000 && read_file(paths[i]).find("allocated ") == std::string::npos; ++t) usleep(10000);
    const std::string out = read_file(paths[i]);
    const auto at = out.find("allocated ");
    ASSERT_NE(at, std::string::npos) << out;
    total += std::strtoull(out.c_str() + at + 10, nullptr, 10);
  }
  std::ofstream(release).put('1');
  for (int i = 0; i < 3; ++i) EXPECT_EQ(wait_child(pids[i]), 0) << read_file(paths[i]);
  EXPECT_EQ(total, 1024u) << "MiB held at once by three processes of one tenant with a 1 GiB cap";
}

TEST_F(Accounting, ThreadsAllocatingAndFreeingAtOnceNeverPassTheCapAndLeaveNothing) {
  // 8 threads, random sizes and orders: the tenant's usage never passes the cap (checked from
  // outside by cuMemGetInfo), and once all is freed it is exactly zero again.
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(context_);
      std::mt19937_64 rng(t);
      std::vector<CUdeviceptr> held;
      for (int i = 0; i < 4000; ++i) {
        if (!held.empty() && (rng() % 2 == 0 || held.size() > 64)) {
          const std::size_t k = rng() % held.size();
          if (cuMemFree_v2(held[k]) != CUDA_SUCCESS) over = true;
          held[k] = held.back();
          held.pop_back();
        } else {
          CUdeviceptr p = 0;
          const CUresult rc = cuMemAlloc_v2(&p, (1 + rng() % 64) * kMiB);
          if (rc == CUDA_SUCCESS)
            held.push_back(p);
          else if (rc != CUDA_ERROR_OUT_OF_MEMORY)
            over = true;
        }
        std::size_t f = 0, total = 0;
        if (i % 64 == 0 && (cuMemGetInfo_v2(&f, &total) != CUDA_SUCCESS || f > kCap)) over = true;
      }
      for (CUdeviceptr p : held) cuMemFree_v2(p);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(over.load());
  EXPECT_EQ(mem_info().free, kCap);
}

TEST_F(Accounting, AKilledMemberGivesItsMemoryBackWithinASecond) {
  std::string out_path;
  const pid_t holder = spawn_child("fill-and-hold", {"SLICE_TENANT=killed", "RELEASE_FILE=/nonexistent"}, out_path);
  for (int t = 0; t < 1000 && read_file(out_path).find("allocated 1024 MiB") == std::string::npos; ++t) usleep(10000);
  ASSERT_NE(read_file(out_path).find("allocated 1024 MiB"), std::string::npos) << read_file(out_path);
  kill(holder, SIGKILL);
  wait_child(holder);
  const auto start = std::chrono::steady_clock::now();
  std::string out;
  EXPECT_EQ(run_child("fill", {"SLICE_TENANT=killed"}, &out), 0) << out;
  EXPECT_NE(out.find("allocated 1024 MiB"), std::string::npos) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_F(Accounting, AnUnnamedProcessesChildrenJoinItsTenantWithoutAVariable) {
  std::string out;
  EXPECT_EQ(run_child("unnamed-parent", {"SLICE_TENANT="}, &out), 0) << out;
}

TEST_F(Accounting, BadConfigurationFailsClosed) {
  std::string out;
  EXPECT_EQ(run_child("expect-fail-closed", {"SLICE_MEMORY_LIMIT=12X", "SLICE_LOG_FILE="}, &out), 0) << out;
  EXPECT_EQ(count_lines(out, " error: "), 1) << out;
  EXPECT_NE(out.find("SLICE_MEMORY_LIMIT='12X'"), std::string::npos) << out;
  EXPECT_NE(out.find("example: SLICE_MEMORY_LIMIT="), std::string::npos) << out;
  EXPECT_EQ(run_child("expect-fail-closed", {"SLICE_COORDINATOR_DIR=relative/dir", "SLICE_LOG_FILE="}, &out), 0) << out;
  EXPECT_EQ(count_lines(out, " error: "), 1) << out;
  EXPECT_NE(out.find("SLICE_COORDINATOR_DIR"), std::string::npos) << out;
  // The escape hatch works even with the broken variable.
  EXPECT_EQ(run_child("expect-uncapped", {"SLICE_MEMORY_LIMIT=12X", "SLICE_DISABLE=1"}, &out), 0) << out;
}

TEST_F(Accounting, ContextMemoryIsChargedAndDestroyingAContextFreesWhatWasInIt) {
  // A machine of its own whose contexts take 300 MiB each, as real ones take hundreds of MiB.
  const std::string tmp = std::getenv("SLICE_TEST_TMPDIR");
  std::string out;
  EXPECT_EQ(run_child("contexts",
                      {"SIMGPU_STATE=" + tmp + "/ctx-state", "SIMGPU_CONTEXT_BYTES=300Mi",
                       "SLICE_COORDINATOR_DIR=" + tmp + "/ctx-coordinator", "SLICE_LOG_FILE="},
                      &out),
            0)
      << out;
  EXPECT_EQ(count_lines(out, " warn: "), 1) << out;  // the one refused context
  EXPECT_NE(out.find("cuCtxCreate of 300.0 MiB"), std::string::npos) << out;
}

TEST_F(Accounting, GraphMemoryIsChargedFromTheFirstLaunchUntilTrimmed) {
  const auto make_graph = [&](std::size_t bytes, CUgraphExec* exec) {
    CUgraph graph = nullptr;
    ASSERT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params.poolProps.location.id = device_;
    params.bytesize = bytes;
    CUgraphNode alloc = nullptr, free_node = nullptr;
    ASSERT_EQ(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &params), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphAddMemFreeNode(&free_node, graph, &alloc, 1, params.dptr), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphInstantiateWithFlags(exec, graph, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  };
  CUgraphExec first = nullptr, second = nullptr;
  make_graph(512 * kMiB, &first);
  EXPECT_EQ(mem_info().free, kCap);  // instantiation maps nothing
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CU_OK(cuGraphLaunch(first, stream));
  CU_OK(cuStreamSynchronize(stream));
  EXPECT_EQ(mem_info().free, kCap - 512 * kMiB);  // the graph keeps its memory between launches
  CU_OK(cuGraphLaunch(first, stream));            // and a second launch takes no more
  CU_OK(cuStreamSynchronize(stream));
  EXPECT_EQ(mem_info().free, kCap - 512 * kMiB);
  make_graph(768 * kMiB, &second);
  EXPECT_EQ(cuGraphLaunch(second, stream), CUDA_ERROR_OUT_OF_MEMORY);  // refused before the driver
  EXPECT_EQ(cuGraphUpload(second, stream), CUDA_ERROR_OUT_OF_MEMORY);
  CU_OK(cuGraphExecDestroy(first));
  EXPECT_EQ(mem_info().free, kCap - 512 * kMiB);  // the graph pool keeps it until trimmed
  CU_OK(cuDeviceGraphMemTrim(device_));
  EXPECT_EQ(mem_info().free, kCap);
  CU_OK(cuGraphLaunch(second, stream));
  CU_OK(cuStreamSynchronize(stream));
  EXPECT_EQ(mem_info().free, kCap - 768 * kMiB);
  CU_OK(cuGraphExecDestroy(second));
  CU_OK(cuDeviceGraphMemTrim(device_));
  EXPECT_EQ(mem_info().free, kCap);
  CU_OK(cuStreamDestroy_v2(stream));
}

TEST_F(Accounting, IpcMemoryIsChargedOnlyWhereItIsNewToTheTenant) {
  CUdeviceptr p = 0;
  CU_OK(cuMemAlloc_v2(&p, 256 * kMiB));
  CUipcMemHandle handle{};
  CU_OK(cuIpcGetMemHandle(&handle, p));
  const std::string hex = handle_hex(handle);
  std::string out;
  // Another tenant opening it: 256 MiB new to that tenant.
  EXPECT_EQ(run_child("ipc-open", {"SLICE_TENANT=other", "IPC_HANDLE=" + hex, "IPC_EXPECT_FREE_MIB=768"}, &out), 0)
      << out;
  // A process of this tenant: already charged here once.
  EXPECT_EQ(run_child("ipc-open", {"IPC_HANDLE=" + hex, "IPC_EXPECT_FREE_MIB=768"}, &out), 0) << out;
  EXPECT_EQ(mem_info().free, kCap - 256 * kMiB);
  // A tenant with no room for it: the open is refused and undone.
  EXPECT_EQ(
      run_child("ipc-open-refused", {"SLICE_TENANT=small", "SLICE_MEMORY_LIMIT=128Mi", "IPC_HANDLE=" + hex}, &out), 0)
      << out;
  CU_OK(cuMemFree_v2(p));
}

TEST_F(Accounting, TwoGpusEachWithItsCapAndNvmlInitialisedFirst) {
  // NVML initialised before CUDA, and NVML asked about each GPU by its own handle: the caps follow
  // the GPU (by UUID), never an index (HAMi-core loses its cap when NVML initialises first).
  const std::string tmp = std::getenv("SLICE_TEST_TMPDIR");
  std::string out;
  EXPECT_EQ(
      run_child("two-gpus",
                {"SIMGPU_STATE=" + tmp + "/two-state", "SIMGPU_DEVICES=2",
                 "SLICE_COORDINATOR_DIR=" + tmp + "/two-coordinator", "SLICE_MEMORY_LIMIT_1=512Mi", "SLICE_TENANT=two"},
                &out),
      0)
      << out;
}

TEST_F(Accounting, AGraphInstantiatedThroughTheOldFiveArgumentExportIsRefusedAtLaunch) {
  // cuGraphInstantiate's pre-12.0 ABI (phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize),
  // still exported by the driver and handed out by cuGetProcAddress to programs built for CUDA 10.x
  // and 11.x: a graph instantiated through it must be charged at its launch like any other.
  using OldInstantiate = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, std::size_t);
  void* by_dlsym = dlsym(RTLD_DEFAULT, "cuGraphInstantiate");
  void* by_procaddr = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CU_OK(cuGetProcAddress_v2("cuGraphInstantiate", &by_procaddr, 10020, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  ASSERT_NE(by_dlsym, nullptr);
  ASSERT_NE(by_procaddr, nullptr);
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int way = 0; way < 2; ++way) {
    SCOPED_TRACE(way == 0 ? "through dlsym(RTLD_DEFAULT)" : "through cuGetProcAddress(10020)");
    void* fn = way == 0 ? by_dlsym : by_procaddr;
    CUgraph graph = nullptr;
    CU_OK(make_alloc_graph({{device_, 3072 * kMiB}}, &graph));
    CUgraphExec exec = nullptr;
    CUgraphNode error_node = nullptr;
    char log[256] = {};
    CU_OK(reinterpret_cast<OldInstantiate>(fn)(&exec, graph, &error_node, log, sizeof log));
    EXPECT_EQ(cuGraphLaunch(exec, stream), CUDA_ERROR_OUT_OF_MEMORY) << "3 GiB of graph memory past a 1 GiB cap";
    CU_OK(cuStreamSynchronize(stream));
    EXPECT_EQ(mem_info().free, kCap);
    CU_OK(cuGraphExecDestroy(exec));
    CU_OK(cuGraphDestroy(graph));
    CU_OK(cuDeviceGraphMemTrim(device_));
  }
  CU_OK(cuStreamDestroy_v2(stream));
}

TEST_F(Accounting, AnotherGpusDefaultPoolUsedFromThisGpusStreamIsChargedToItsGpu) {
  const std::string tmp = std::getenv("SLICE_TEST_TMPDIR");
  std::string out;
  EXPECT_EQ(run_child("pool-of-gpu1",
                      {"SIMGPU_STATE=" + tmp + "/pool1-state", "SIMGPU_DEVICES=2",
                       "SLICE_COORDINATOR_DIR=" + tmp + "/pool1-coordinator", "SLICE_TENANT=pool1"},
                      &out),
            0)
      << out;
}

TEST_F(Accounting, AGraphWithAllocationsOnTwoGpusChargesEachGpuItsOwnPart) {
  const std::string tmp = std::getenv("SLICE_TEST_TMPDIR");
  std::string out;
  EXPECT_EQ(run_child("graph-on-two-gpus",
                      {"SIMGPU_STATE=" + tmp + "/graph2-state", "SIMGPU_DEVICES=2",
                       "SLICE_COORDINATOR_DIR=" + tmp + "/graph2-coordinator", "SLICE_TENANT=graph2"},
                      &out),
            0)
      << out;
}

TEST_F(Accounting, MemoryOutstandingWhenItsPoolWasDestroyedComesBackWithItsFree) {
  // In a child of a tenant of its own: a charge left behind goes with it, not into the next tests.
  std::string out;
  EXPECT_EQ(run_child("free-after-pool-destroy", {"SLICE_TENANT=orphan"}, &out), 0) << out;
}

TEST_F(Accounting, TwoThreadsMappingAndUnmappingOneAddressLeaveNothingCharged) {
  // Each thread maps its own handle at one shared address and unmaps it, thousands of times; the
  // driver refuses whichever comes second. The table of mappings must follow the driver's order.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  const std::size_t size = 64 * kMiB;
  CUmemGenericAllocationHandle handles[2] = {};
  for (auto& h : handles) CU_OK(cuMemCreate(&h, size, &prop, 0));
  CUdeviceptr va = 0;
  CU_OK(cuMemAddressReserve(&va, size, 0, 0, 0));
  EXPECT_EQ(mem_info().free, kCap - 2 * size);
  std::atomic<int> mapped{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(context_);
      for (int i = 0; i < 20000; ++i) {
        if (cuMemMap(va, size, 0, handles[t], 0) == CUDA_SUCCESS) mapped.fetch_add(1, std::memory_order_relaxed);
        cuMemUnmap(va, size);  // its own mapping, the other thread's, or none
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(mapped.load(), 0);
  cuMemUnmap(va, size);  // whatever is still mapped
  CU_OK(cuMemAddressFree(va, size));
  for (auto h : handles) CU_OK(cuMemRelease(h));
  EXPECT_EQ(mem_info().free, kCap) << "all unmapped and released, yet still charged";
}

TEST_F(Accounting, PoolMemoryAnIdleProcessGaveBackAtASynchronisationIsFreeForTheOthers) {
  // Process A: 800 MiB from the default pool (release threshold 0), freed, synchronised (the pool
  // gives the memory back there), then idle. Process B of the same tenant then fits 512 MiB.
  const std::string release = std::string(std::getenv("SLICE_TEST_TMPDIR")) + "/release-idle-pool";
  std::string a_out;
  const pid_t a = spawn_child("pool-free-then-idle", {"SLICE_TENANT=idlepool", "RELEASE_FILE=" + release}, a_out);
  ASSERT_GT(a, 0);
  const bool ready = wait_for_output(a_out, "ready");
  std::string b_out;
  const int b = ready ? run_child("alloc-512", {"SLICE_TENANT=idlepool"}, &b_out) : -1;
  std::ofstream(release).put('1');
  EXPECT_EQ(wait_child(a), 0) << read_file(a_out);
  unlink(release.c_str());
  ASSERT_TRUE(ready) << read_file(a_out);
  EXPECT_EQ(b, 0) << b_out;
}

TEST_F(Accounting, IpcOpensAreCountedAndGoWithTheContextTheyWereOpenedIn) {
  CUdeviceptr p = 0;
  CU_OK(cuMemAlloc_v2(&p, 256 * kMiB));
  CUipcMemHandle handle{};
  CU_OK(cuIpcGetMemHandle(&handle, p));
  std::string out;
  EXPECT_EQ(run_child("ipc-count", {"SLICE_TENANT=ipccount", "IPC_HANDLE=" + handle_hex(handle)}, &out), 0) << out;
  CU_OK(cuMemFree_v2(p));
}

TEST_F(Accounting, AStreamOrderedAllocationBeingCapturedIsNotCharged) {
  CUdeviceptr held = 0;
  CU_OK(cuMemAlloc_v2(&held, 900 * kMiB));
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUdeviceptr captured = 0;
  // Only 124 MiB left, but a capture allocates nothing: the graph is charged when launched.
  EXPECT_EQ(cuMemAllocAsync(&captured, 200 * kMiB, stream), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().free, kCap - 900 * kMiB);
  if (captured != 0) {
    EXPECT_EQ(cuMemFreeAsync(captured, stream), CUDA_SUCCESS);
  }
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  if (graph != nullptr) {
    CU_OK(cuGraphDestroy(graph));
  }
  EXPECT_EQ(mem_info().free, kCap - 900 * kMiB);
  CU_OK(cuMemFree_v2(held));
  CU_OK(cuStreamDestroy_v2(stream));
}

TEST_F(Accounting, AfterLeavingAtExitReportsShowTheCapAndAllocationsGoThrough) {
  std::string out;
  EXPECT_EQ(run_child("at-exit", {"SLICE_TENANT=exiting"}, &out), 0) << out;
  EXPECT_NE(out.find("at exit: total 1024 MiB"), std::string::npos) << out;  // the handler did run
}

// ---- child modes ----

int child_fail(const char* what) {
  std::fprintf(stdout, "child: %s\n", what);
  return 1;
}

// slice.h's slice_get_info, looked up as a program does (libslice.so is preloaded, not linked).
int slice_info_of(int device, slice_info* info) {
  const auto get = reinterpret_cast<slice_get_info_fn>(dlsym(RTLD_DEFAULT, "slice_get_info"));
  return get != nullptr ? get(device, info) : child_fail("slice_get_info is not exported");
}

// cuMemGetInfo's free, with `ctx` current (none: as it is), is `expected`; else says so.
bool child_free_is(std::uint64_t expected, const char* when, CUcontext ctx = nullptr) {
  if (ctx != nullptr && cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    child_fail("cuCtxSetCurrent");
    return false;
  }
  std::size_t f = 0, t = 0;
  if (cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS && f == expected) return true;
  std::printf("child: free %zu MiB %s, expected %llu MiB\n", f >> 20, when,
              static_cast<unsigned long long>(expected >> 20));
  return false;
}

// Runs after libslice's own exit handler (registered at the first CUDA call, after this one). The
// checks run on a thread of their own: this thread's thread_local objects (the simulated driver's
// stack of current contexts among them) are already destroyed when exit handlers run.
CUcontext g_exit_context = nullptr;
void check_at_exit() {
  bool ok = false;
  std::thread([&] {
    std::size_t f = 0, t = 0, total = 0;
    CUdevice dev = 0;
    CUdeviceptr p = 0;
    const CUresult set = cuCtxSetCurrent(g_exit_context);
    const CUresult info = cuMemGetInfo_v2(&f, &t);
    const CUresult total_rc =
        cuDeviceGet(&dev, 0) == CUDA_SUCCESS ? cuDeviceTotalMem_v2(&total, dev) : CUDA_ERROR_INVALID_DEVICE;
    const CUresult alloc = cuMemAlloc_v2(&p, 512 * kMiB);
    std::printf(
        "at exit: total %zu MiB free %zu MiB (rc %d), cuDeviceTotalMem %zu MiB (rc %d), cuMemAlloc 512 MiB rc %d\n",
        t >> 20, f >> 20, info, total >> 20, total_rc, alloc);
    std::fflush(stdout);
    ok = set == CUDA_SUCCESS && info == CUDA_SUCCESS && t == kCap && f == kCap && total_rc == CUDA_SUCCESS &&
         total == kCap && alloc == CUDA_SUCCESS;
    if (alloc == CUDA_SUCCESS) cuMemFree_v2(p);
  }).join();
  if (!ok) _exit(1);
}

int child_main(const std::string& mode) {
  if (mode == "at-exit") {
    // Registered before the first CUDA call, so that it runs after libslice has left at exit.
    std::atexit(check_at_exit);
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    CUdeviceptr p = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
      return child_fail("context");
    g_exit_context = ctx;
    if (cuMemAlloc_v2(&p, 256 * kMiB) != CUDA_SUCCESS) return child_fail("alloc");
    return child_free_is(kCap - 256 * kMiB, "before exit") ? 0 : 1;  // held at exit
  }
  if (mode == "two-gpus") {
    if (nvmlInit_v2() != NVML_SUCCESS) return child_fail("nvmlInit");
    nvmlDevice_t nvml[2] = {};
    if (cuInit(0) != CUDA_SUCCESS) return child_fail("cuInit");
    const std::uint64_t caps[2] = {kCap, 512 * kMiB};
    for (int i = 0; i < 2; ++i) {
      CUdevice dev = 0;
      CUcontext ctx = nullptr;
      CUuuid u{};
      if (cuDeviceGet(&dev, i) != CUDA_SUCCESS || cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS ||
          cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return child_fail("device");
      const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
      char uuid[64];
      std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                    b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
      if (nvmlDeviceGetHandleByUUID(uuid, &nvml[i]) != NVML_SUCCESS) return child_fail("NVML handle");
      std::uint64_t got = 0;
      CUdeviceptr p = 0;
      while (cuMemAlloc_v2(&p, 64 * kMiB) == CUDA_SUCCESS) got += 64 * kMiB;
      nvmlMemory_t m{};
      if (nvmlDeviceGetMemoryInfo(nvml[i], &m) != NVML_SUCCESS) return child_fail("NVML memory");
      std::printf("GPU %d: allocated %llu MiB; NVML total %llu MiB used %llu MiB\n", i,
                  static_cast<unsigned long long>(got >> 20), m.total >> 20, m.used >> 20);
      if (got != caps[i] || m.total != caps[i] || m.used != caps[i]) return child_fail("wrong cap on this GPU");
    }
    return 0;
  }
  if (mode == "expect-fail-closed") {
    if (cuInit(0) != CUDA_ERROR_INVALID_VALUE) return child_fail("cuInit did not fail closed");
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 1) != CUDA_ERROR_INVALID_VALUE) return child_fail("cuMemAlloc did not fail closed");
    std::size_t f = 0, t = 0;
    if (cuMemGetInfo_v2(&f, &t) != CUDA_ERROR_INVALID_VALUE) return child_fail("cuMemGetInfo did not fail closed");
    if (cuInit(0) != CUDA_ERROR_INVALID_VALUE) return child_fail("a second cuInit did not fail");
    return 0;
  }
  if (cuInit(0) != CUDA_SUCCESS) return child_fail("cuInit");
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return child_fail("context");
  if (mode == "pool-of-gpu1") {
    // Device 1's default pool, allocated from on a stream of device 0's context.
    CUdevice dev1 = 0;
    CUcontext ctx1 = nullptr;
    CUstream stream = nullptr;
    CUmemoryPool pool1 = nullptr;
    if (cuDeviceGet(&dev1, 1) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx1, dev1) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        cuDeviceGetDefaultMemPool(&pool1, dev1) != CUDA_SUCCESS)
      return child_fail("setup");
    CUdeviceptr p = 0;
    if (cuMemAllocFromPoolAsync(&p, 900 * kMiB, pool1, stream) != CUDA_SUCCESS)
      return child_fail("cuMemAllocFromPoolAsync from device 1's pool");
    bool ok = child_free_is(kCap - 900 * kMiB, "on GPU 1 with 900 MiB from its pool", ctx1);
    ok &= child_free_is(kCap, "on GPU 0 (the stream's) with 900 MiB from GPU 1's pool", ctx);
    if (cuMemFreeAsync(p, stream) != CUDA_SUCCESS || cuStreamSynchronize(stream) != CUDA_SUCCESS ||
        cuMemPoolTrimTo(pool1, 0) != CUDA_SUCCESS)
      return child_fail("free");
    ok &= child_free_is(kCap, "on GPU 1 after the free and a trim", ctx1);
    ok &= child_free_is(kCap, "on GPU 0 after the free and a trim", ctx);
    return ok ? 0 : 1;
  }
  if (mode == "graph-on-two-gpus") {
    CUdevice dev1 = 0;
    CUcontext ctx1 = nullptr;
    CUstream stream = nullptr;
    if (cuDeviceGet(&dev1, 1) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx1, dev1) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
      return child_fail("setup");
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    if (make_alloc_graph({{0, 2 * kMiB}, {1, 900 * kMiB}}, &graph) != CUDA_SUCCESS ||
        cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS)
      return child_fail("graph");
    if (cuGraphLaunch(exec, stream) != CUDA_SUCCESS || cuStreamSynchronize(stream) != CUDA_SUCCESS)
      return child_fail("launch");
    bool ok = child_free_is(kCap - 2 * kMiB, "on GPU 0 after the launch (its node: 2 MiB)", ctx);
    ok &= child_free_is(kCap - 900 * kMiB, "on GPU 1 after the launch (its node: 900 MiB)", ctx1);
    if (cuGraphExecDestroy(exec) != CUDA_SUCCESS || cuGraphDestroy(graph) != CUDA_SUCCESS ||
        cuDeviceGraphMemTrim(dev) != CUDA_SUCCESS || cuDeviceGraphMemTrim(dev1) != CUDA_SUCCESS)
      return child_fail("destroy and trim");
    ok &= child_free_is(kCap, "on GPU 0 after a trim", ctx);
    ok &= child_free_is(kCap, "on GPU 1 after a trim", ctx1);
    return ok ? 0 : 1;
  }
  if (mode == "pool-free-then-idle") {  // then idle until RELEASE_FILE exists (at most 10 s)
    CUmemoryPool pool = nullptr;
    CUstream stream = nullptr;
    cuuint64_t keep_none = 0;
    if (cuDeviceGetDefaultMemPool(&pool, dev) != CUDA_SUCCESS ||
        cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_none) != CUDA_SUCCESS ||
        cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
      return child_fail("setup");
    CUdeviceptr p = 0;
    if (cuMemAllocAsync(&p, 800 * kMiB, stream) != CUDA_SUCCESS || cuMemFreeAsync(p, stream) != CUDA_SUCCESS ||
        cuStreamSynchronize(stream) != CUDA_SUCCESS)
      return child_fail("alloc, free, synchronise");
    std::printf("ready\n");
    std::fflush(stdout);
    const char* release = std::getenv("RELEASE_FILE");
    for (int i = 0; i < 1000 && release != nullptr && access(release, F_OK) != 0; ++i) usleep(10000);
    return 0;
  }
  if (mode == "free-after-pool-destroy") {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUstream stream = nullptr;
    if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return child_fail("stream");
    bool ok = true;
    for (int round = 0; round < 3; ++round) {
      std::printf("round %d\n", round);
      CUmemoryPool pool = nullptr;
      CUdeviceptr p = 0;
      if (cuMemPoolCreate(&pool, &props) != CUDA_SUCCESS) return child_fail("cuMemPoolCreate");
      if (const CUresult rc = cuMemAllocFromPoolAsync(&p, 400 * kMiB, pool, stream)) {
        std::printf("child: cuMemAllocFromPoolAsync of 400 MiB: %d\n", rc);
        return 1;
      }
      ok &= child_free_is(kCap - 400 * kMiB, "with 400 MiB from the pool");
      if (cuMemPoolDestroy(pool) != CUDA_SUCCESS) return child_fail("cuMemPoolDestroy");
      // The allocation outlives its pool; its free gives the memory back.
      if (const CUresult rc = cuMemFreeAsync(p, stream)) {
        std::printf("child: cuMemFreeAsync of the destroyed pool's allocation: %d\n", rc);
        ok = false;
      }
      if (cuStreamSynchronize(stream) != CUDA_SUCCESS) return child_fail("cuStreamSynchronize");
      ok &= child_free_is(kCap, "after the free of the destroyed pool's allocation and a synchronisation");
    }
    CUdeviceptr all = 0;
    if (const CUresult rc = cuMemAlloc_v2(&all, kCap)) {
      std::printf("child: cuMemAlloc of the whole cap after three rounds: %d\n", rc);
      ok = false;
    }
    return ok ? 0 : 1;
  }
  if (mode == "alloc-512") {
    CUdeviceptr p = 0;
    const CUresult rc = cuMemAlloc_v2(&p, 512 * kMiB);
    std::printf("cuMemAlloc 512 MiB: %d\n", rc);
    return rc == CUDA_SUCCESS ? 0 : child_fail("512 MiB refused");
  }
  if (mode == "ipc-count") {  // another tenant than the exporter's: each open is new memory to it
    const char* hex = std::getenv("IPC_HANDLE");
    CUipcMemHandle handle{};
    for (std::size_t i = 0; hex != nullptr && i < sizeof handle.reserved && hex[2 * i] != '\0'; ++i)
      handle.reserved[i] = static_cast<char>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
    const std::uint64_t charged = kCap - 256 * kMiB;
    bool ok = true;
    // Opened twice: the same pointer, counted by the driver, charged once; one close keeps it.
    CUdeviceptr p = 0, q = 0;
    if (cuIpcOpenMemHandle_v2(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS ||
        cuIpcOpenMemHandle_v2(&q, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
      return child_fail("open twice");
    if (p != q) return child_fail("two opens gave two pointers");
    ok &= child_free_is(charged, "opened twice");
    if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS) return child_fail("first close");
    ok &= child_free_is(charged, "after one close of two opens (still mapped)");
    if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS) return child_fail("second close");
    ok &= child_free_is(kCap, "after the second close");
    // Opened in a context of its own, then that context destroyed: closed with it.
    CUcontext mine = nullptr;
    if (cuCtxCreate_v2(&mine, 0, dev) != CUDA_SUCCESS) return child_fail("cuCtxCreate");
    if (cuIpcOpenMemHandle_v2(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
      return child_fail("open in a created context");
    ok &= child_free_is(charged, "opened in a created context");
    if (cuCtxDestroy_v2(mine) != CUDA_SUCCESS) return child_fail("cuCtxDestroy");
    ok &= child_free_is(kCap, "after destroying the context it was opened in", ctx);
    // Opened in the primary context, then that reset.
    if (cuIpcOpenMemHandle_v2(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS)
      return child_fail("open in the primary context");
    ok &= child_free_is(charged, "opened in the primary context");
    if (cuDevicePrimaryCtxReset_v2(dev) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
      return child_fail("primary context reset");
    ok &= child_free_is(kCap, "after resetting the primary context it was opened in", ctx);
    return ok ? 0 : 1;
  }
  if (mode == "contexts") {
    std::size_t f = 0, t = 0;
    const auto free_is = [&](std::uint64_t expected, const char* when) {
      cuMemGetInfo_v2(&f, &t);
      if (f == expected) return true;
      std::printf("child: free %zu MiB %s, expected %llu MiB\n", f >> 20, when,
                  static_cast<unsigned long long>(expected >> 20));
      return false;
    };
    if (!free_is(kCap - 300 * kMiB, "with the primary context")) return 1;
    CUcontext a = nullptr, b = nullptr, c = nullptr;
    if (cuCtxCreate_v2(&a, 0, dev) != CUDA_SUCCESS || cuCtxCreate_v2(&b, 0, dev) != CUDA_SUCCESS)
      return child_fail("cuCtxCreate");
    if (!free_is(kCap - 900 * kMiB, "with three contexts")) return 1;
    if (cuCtxCreate_v2(&c, 0, dev) != CUDA_ERROR_OUT_OF_MEMORY) return child_fail("a fourth context fitted");
    if (!free_is(kCap - 900 * kMiB, "after the refused context")) return 1;
    CUdeviceptr p = 0;  // b is current (cuCtxCreate makes the new context current)
    if (cuMemAlloc_v2(&p, 100 * kMiB) != CUDA_SUCCESS) return child_fail("alloc in b");
    if (cuCtxDestroy_v2(b) != CUDA_SUCCESS) return child_fail("destroy b");
    if (cuCtxSetCurrent(a) != CUDA_SUCCESS) return child_fail("set a");
    if (!free_is(kCap - 600 * kMiB, "after destroying b and what was in it")) return 1;
    if (cuCtxDestroy_v2(a) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return child_fail("destroy a");
    if (!free_is(kCap - 300 * kMiB, "after destroying a")) return 1;
    if (cuDevicePrimaryCtxRelease_v2(dev) != CUDA_SUCCESS) return child_fail("release");
    if (cuCtxCreate_v2(&a, 0, dev) != CUDA_SUCCESS) return child_fail("cuCtxCreate after the release");
    return free_is(kCap - 300 * kMiB, "with only a new context") ? 0 : 1;
  }
  if (mode == "ipc-open" || mode == "ipc-open-refused") {
    const char* hex = std::getenv("IPC_HANDLE");
    CUipcMemHandle handle{};
    for (std::size_t i = 0; hex != nullptr && i < sizeof handle.reserved && hex[2 * i] != '\0'; ++i)
      handle.reserved[i] = static_cast<char>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
    CUdeviceptr p = 0;
    const CUresult rc = cuIpcOpenMemHandle_v2(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    std::size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    if (mode == "ipc-open-refused") {
      if (rc != CUDA_ERROR_OUT_OF_MEMORY) return child_fail("an IPC open past the cap was not refused");
      return f == t ? 0 : child_fail("a refused IPC open left a charge");
    }
    if (rc != CUDA_SUCCESS) return child_fail("cuIpcOpenMemHandle");
    const std::uint64_t expected = std::strtoull(std::getenv("IPC_EXPECT_FREE_MIB"), nullptr, 10) * kMiB;
    if (f != expected) {
      std::printf("child: free %zu MiB after the open, expected %llu MiB\n", f >> 20,
                  static_cast<unsigned long long>(expected >> 20));
      return 1;
    }
    if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS) return child_fail("close");
    cuMemGetInfo_v2(&f, &t);
    const std::uint64_t own = std::string(std::getenv("SLICE_TENANT")) == "acct" ? 256 * kMiB : 0;
    return f == kCap - own ? 0 : child_fail("closing did not give the charge back");
  }
  if (mode == "expect-uncapped") {
    std::size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);
    slice_info info{};
    info.size = sizeof info;
    if (slice_info_of(0, &info) != SLICE_ERROR_NOT_RUNNING)
      return child_fail("slice_get_info answered with SLICE_DISABLE=1");
    return t > kCap ? 0 : child_fail("capped although SLICE_DISABLE=1");
  }
  if (mode == "hold-other-tenant") {  // holds memory until killed
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 64 * kMiB) != CUDA_SUCCESS) return child_fail("alloc");
    std::printf("ready\n");
    std::fflush(stdout);
    for (int i = 0; i < 3000; ++i) usleep(10000);  // killed long before; never outlives a hung test by much
    return 0;
  }
  if (mode == "fill" || mode == "fill-and-hold") {
    std::uint64_t got = 0;
    CUdeviceptr p = 0;
    while (cuMemAlloc_v2(&p, 64 * kMiB) == CUDA_SUCCESS) {
      got += 64 * kMiB;
      sched_yield();  // let processes racing for the same cap interleave
    }
    std::printf("allocated %llu MiB\n", static_cast<unsigned long long>(got / kMiB));
    std::fflush(stdout);
    if (mode == "fill-and-hold") {  // until the parent has seen every racer's result (at most 10 s)
      const char* release = std::getenv("RELEASE_FILE");
      for (int i = 0; i < 1000 && release != nullptr && access(release, F_OK) != 0; ++i) usleep(10000);
    }
    return 0;
  }
  if (mode == "unnamed-parent") {
    // libslice writes nothing into the environment (issue 26): the child finds the tenant through
    // its lineage (libslice/coordinator/lineage.h).
    if (std::getenv("SLICE_TENANT") != nullptr) return child_fail("SLICE_TENANT written into the environment");
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 512 * kMiB) != CUDA_SUCCESS) return child_fail("alloc");
    // Its child, started with the same environment (no SLICE_TENANT), shares the budget.
    std::string out;
    if (run_child("fill", {}, &out) != 0) return child_fail("grandchild");
    std::printf("grandchild: %s", out.c_str());
    return out.find("allocated 512 MiB") != std::string::npos ? 0 : child_fail("grandchild had another budget");
  }
  return child_fail("unknown mode");
}

}  // namespace

int main(int argc, char** argv) { return slice_test::shim_test_main(argc, argv, child_main); }
