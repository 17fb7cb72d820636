// The driver calling its own exports through the dynamic linker (issue 25): run with
// SIMGPU_CALL_THROUGH_LINKER=1, the simulated driver's old exports forward to their newer ones
// through the global scope (cuIpcOpenMemHandle -> cuIpcOpenMemHandle_v2, cuCtxCreate_v3/_v4 ->
// cuCtxCreate_v2, cuDevicePrimaryCtxRelease -> _v2, cuLaunchGrid -> cuLaunchGridAsync, ...), so that
// libslice's hook of the inner export runs on the calling thread inside its own call of the outer
// one. It must pass straight through (hook_frame.h): no lock of libslice's taken twice (a hang), no
// memory charged twice. (The rest of the shim suite runs in this mode too: tests/shim/CMakeLists.txt.)
#include <dlfcn.h>

#include <chrono>
#include <future>
#include <thread>

#include "coordinator_view.h"
#include "shim_test_support.h"

namespace {

using namespace slice_test;

constexpr std::uint64_t kContext = 100 * kMiB;  // SIMGPU_CONTEXT_BYTES

std::uint64_t tenant_usage(const std::string& tenant) {
  std::string error;
  for (const slice::TenantView& t : slice::read_coordinator(coordinator_dir(), policy_dir(), error))
    if (t.name == tenant && !t.gpus.empty()) return t.gpus[0].used_bytes;
  return ~0ull;
}

class Reentry : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {  // one reference to the primary context, which a test gives back
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDeviceGet(&device_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, device_), CUDA_SUCCESS);
  }
  void SetUp() override { ASSERT_EQ(cuCtxSetCurrent(primary_), CUDA_SUCCESS); }
  static inline CUdevice device_ = 0;
  static inline CUcontext primary_ = nullptr;
};

TEST_F(Reentry, AContextMadeThroughANewerExportIsChargedOnce) {
  const std::uint64_t before = tenant_usage("reentry");
  CUcontext v3 = nullptr, v4 = nullptr;
  ASSERT_EQ(cuCtxCreate_v3(&v3, nullptr, 0, 0, device_), CUDA_SUCCESS);
  EXPECT_EQ(tenant_usage("reentry"), before + kContext);
  ASSERT_EQ(cuCtxCreate_v4(&v4, nullptr, 0, device_), CUDA_SUCCESS);
  EXPECT_EQ(tenant_usage("reentry"), before + 2 * kContext);
  ASSERT_EQ(cuCtxDestroy_v2(v4), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy_v2(v3), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(primary_), CUDA_SUCCESS);
  EXPECT_EQ(tenant_usage("reentry"), before);
}

TEST_F(Reentry, IpcOpenedThroughTheOldExportIsChargedOnceWithoutHanging) {
  // Memory of this tenant's, opened by a process of another tenant through cuIpcOpenMemHandle (the
  // old export, which the driver forwards to _v2): new memory to that tenant, charged once there.
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 64 * kMiB), CUDA_SUCCESS);
  CUipcMemHandle h{};
  ASSERT_EQ(cuIpcGetMemHandle(&h, p), CUDA_SUCCESS);
  std::string out;
  EXPECT_EQ(run_child("open-v1", {"IPC_HANDLE=" + handle_hex(h), "SLICE_TENANT=reentry-other"}, &out), 0) << out;
  EXPECT_NE(out.find("charged 64 MiB, then 0"), std::string::npos) << out;
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(Reentry, APrimaryContextReleasedThroughTheOldExportIsForgottenOnce) {
  // Released through cuDevicePrimaryCtxRelease (forwarded to _v2) and retained again: charged as a
  // new context, once.
  const std::uint64_t before = tenant_usage("reentry");
  ASSERT_EQ(cuDevicePrimaryCtxRelease(device_), CUDA_SUCCESS);
  EXPECT_EQ(tenant_usage("reentry"), before - kContext);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary_, device_), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(primary_), CUDA_SUCCESS);
  EXPECT_EQ(tenant_usage("reentry"), before);
}

TEST_F(Reentry, AnOldLaunchPassesTheGateOnce) {
  static const char kPtx[] = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry noop() { ret; }\n";
  CUmodule module = nullptr;
  CUfunction noop = nullptr;
  ASSERT_EQ(cuModuleLoadData(&module, kPtx), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&noop, module, "noop"), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncSetBlockShape(noop, 1, 1, 1), CUDA_SUCCESS);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(cuLaunchGrid(noop, 1, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

// ---- children ----

int open_v1() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
  const std::string hex = std::getenv("IPC_HANDLE");
  CUipcMemHandle h{};
  for (std::size_t i = 0; i < sizeof h.reserved; ++i)
    h.reserved[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  const std::uint64_t before = tenant_usage("reentry-other");
  // A hang here (a lock of libslice's taken again from inside the driver's own call) ends the child.
  auto opened = std::async(std::launch::async, [&] {
    cuCtxSetCurrent(ctx);
    CUdeviceptr p = 0;
    const CUresult rc = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    return std::make_pair(rc, p);
  });
  if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    std::printf("cuIpcOpenMemHandle hung\n");
    std::fflush(stdout);
    std::_Exit(1);
  }
  const auto [rc, p] = opened.get();
  if (rc != CUDA_SUCCESS) return std::printf("cuIpcOpenMemHandle: %d\n", rc), 1;
  const std::uint64_t charged = tenant_usage("reentry-other") - before;
  if (cuIpcCloseMemHandle(p) != CUDA_SUCCESS) return 1;
  std::printf("charged %llu MiB, then %llu\n", static_cast<unsigned long long>(charged >> 20),
              static_cast<unsigned long long>((tenant_usage("reentry-other") - before) >> 20));
  return 0;
}

int child_main(const std::string& mode) {
  if (mode == "open-v1") return open_v1();
  return 2;
}

}  // namespace

int main(int argc, char** argv) { return slice_test::shim_test_main(argc, argv, child_main); }
