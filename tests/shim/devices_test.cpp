// Caps follow the card, whatever the numbering. On a simulated machine of four GPUs of different
// speeds (SIMGPU_SM_COUNT), processes pick cards with CUDA_VISIBLE_DEVICES (ordinals, UUIDs) and
// CUDA_DEVICE_ORDER, so their CUDA ordinals differ from the physical cards and from each other, while
// NVML numbers the cards physically. Every cap must land on the right physical card, checked against
// the driver's own figures (NVML's per-process memory on each card), and cuMemGetInfo,
// cuDeviceTotalMem, NVML in the same process and the coordinator (slicectl status) must agree on
// which card holds what. CMake runs this under LD_PRELOAD=libslice.so.
#include <thread>

#include "coordinator_view.h"
#include "nvml_api.h"
#include "shim_test_support.h"

#include <map>

extern "C" {
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count);
}

namespace {

using namespace slice_test;
using Findings = std::map<std::string, std::string>;

// The four cards' UUIDs, by physical index (NVML's numbering).
std::vector<std::string> physical_uuids() {
  std::vector<std::string> out;
  if (nvmlInit_v2() != NVML_SUCCESS) return out;
  for (unsigned i = 0; i < 4; ++i) {
    nvmlDevice_t d = nullptr;
    char uuid[96] = {};
    if (nvmlDeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS || nvmlDeviceGetUUID(d, uuid, sizeof uuid) != NVML_SUCCESS)
      return {};
    out.push_back(uuid);
  }
  return out;
}

// What the driver says `pid` holds on each physical card.
std::vector<std::uint64_t> held_by(pid_t pid) {
  std::vector<std::uint64_t> out(4, 0);
  for (unsigned i = 0; i < 4; ++i) {
    nvmlDevice_t d = nullptr;
    nvmlProcessInfo_t infos[64];
    unsigned n = 64;
    if (nvmlDeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS ||
        nvmlDeviceGetComputeRunningProcesses_v3(d, &n, infos) != NVML_SUCCESS)
      continue;
    for (unsigned k = 0; k < n; ++k)
      if (infos[k].pid == static_cast<unsigned>(pid)) out[i] = infos[k].usedGpuMemory;
  }
  return out;
}

Findings parse(const std::string& out) {
  Findings f;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (const std::size_t eq = line.find('='); eq != std::string::npos && line.find(' ') > eq)
      f[line.substr(0, eq)] = line.substr(eq + 1);
  return f;
}

class Devices : public ::testing::Test {
 protected:
  void SetUp() override {
    uuids_ = physical_uuids();
    ASSERT_EQ(uuids_.size(), 4u);
    tmp_ = std::getenv("SLICE_TEST_TMPDIR");
  }
  // A probe that allocates ALLOC ("ordinal:MiB ...") and reports; with HOLD, it holds its memory
  // until told to go (release()), so that the others and the driver can be asked meanwhile.
  pid_t start(const std::vector<std::string>& env, std::string& out_path) {
    std::vector<std::string> all = env;
    all.push_back("HOLD_UNTIL=" + tmp_ + "/release");
    const pid_t pid = spawn_child("probe", all, out_path);
    EXPECT_TRUE(wait_for_output(out_path, "holding")) << read_file(out_path);
    return pid;
  }
  void release(std::vector<pid_t> pids) {
    std::ofstream(tmp_ + "/release") << "go";
    for (pid_t p : pids) EXPECT_EQ(wait_child(p), 0);
    std::remove((tmp_ + "/release").c_str());
  }
  const slice::TenantView* tenant(const std::string& name) {
    std::string error;
    views_ = slice::read_coordinator(slice_test::coordinator_dir(), slice_test::policy_dir(), error);
    for (const slice::TenantView& t : views_)
      if (t.name == name) return &t;
    return nullptr;
  }
  std::vector<std::string> uuids_;
  std::string tmp_;
  std::vector<slice::TenantView> views_;
};

constexpr std::uint64_t kMiB64 = kMiB;

// SLICE_MEMORY_LIMIT_GPU_<uuid>: a variable name cannot hold '-', so the UUID's groups are joined by '_'.
std::string uuid_limit(const std::string& uuid, const std::string& value) {
  std::string key = uuid.substr(4);
  for (char& c : key) c = c == '-' ? '_' : c;
  return "SLICE_MEMORY_LIMIT_GPU_" + key + "=" + value;
}

TEST_F(Devices, AUuidKeyedCapHoldsOnItsCardChosenByUuid) {
  // Card 2 alone, named by UUID: the process's ordinal 0.
  std::string out;
  const pid_t p = start(
      {"CUDA_VISIBLE_DEVICES=" + uuids_[2], "SLICE_TENANT=a", uuid_limit(uuids_[2], "1Gi"), "ALLOC=0:1024 0:1"}, out);
  const Findings f = parse(read_file(out));
  EXPECT_EQ(f.at("devices"), "1");
  EXPECT_EQ(f.at("uuid0"), uuids_[2]);
  EXPECT_EQ(f.at("total0"), std::to_string(1024 * kMiB64)) << "cuDeviceTotalMem: the slice";
  EXPECT_EQ(f.at("alloc0:1024"), "ok");
  EXPECT_EQ(f.at("alloc0:1"), "refused") << "the cap is on this card";
  EXPECT_EQ(f.at("nvml_total2"), std::to_string(1024 * kMiB64)) << "NVML in the process: the slice, on card 2";
  EXPECT_EQ(f.at("nvml_total0"), std::to_string(8192 * kMiB64)) << "a card it cannot use: the card's own figure";
  EXPECT_EQ(held_by(p), (std::vector<std::uint64_t>{0, 0, 1024 * kMiB64, 0})) << "the driver: all of it on card 2";
  const slice::TenantView* t = tenant("a");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->gpus.size(), 1u);
  EXPECT_EQ(t->gpus[0].uuid, uuids_[2]) << "slicectl status names the same card";
  EXPECT_EQ(t->gpus[0].used_bytes, 1024 * kMiB64);
  release({p});
}

TEST_F(Devices, AnOrdinalKeyedCapMeansTheProcessesOwnOrdinal) {
  // PCI order, cards 3 and 1: ordinal 1 is card 1, and SLICE_MEMORY_LIMIT_1 caps it alone.
  std::string out;
  const pid_t p = start({"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=3,1", "SLICE_TENANT=b",
                         "SLICE_MEMORY_LIMIT_1=512Mi", "ALLOC=1:512 1:1 0:2048"},
                        out);
  const Findings f = parse(read_file(out));
  EXPECT_EQ(f.at("uuid0"), uuids_[3]);
  EXPECT_EQ(f.at("uuid1"), uuids_[1]);
  EXPECT_EQ(f.at("alloc1:512"), "ok");
  EXPECT_EQ(f.at("alloc1:1"), "refused");
  EXPECT_EQ(f.at("alloc0:2048"), "ok") << "ordinal 0 (card 3) has no cap";
  EXPECT_EQ(f.at("total1"), std::to_string(512 * kMiB64));
  EXPECT_EQ(f.at("total0"), std::to_string(8192 * kMiB64));
  EXPECT_EQ(held_by(p), (std::vector<std::uint64_t>{0, 512 * kMiB64, 0, 2048 * kMiB64}));
  release({p});
}

TEST_F(Devices, TwoProcessesOfOneTenantThatNumberTheCardDifferentlyShareItsCap) {
  // Card 2 is ordinal 0 of the first (by UUID) and ordinal 1 of the second (PCI order, "0,2").
  const std::string cap = uuid_limit(uuids_[2], "1Gi");
  std::string out1, out2;
  const pid_t first = start({"CUDA_VISIBLE_DEVICES=" + uuids_[2], "SLICE_TENANT=c", cap, "ALLOC=0:600"}, out1);
  const pid_t second = start(
      {"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,2", "SLICE_TENANT=c", cap, "ALLOC=1:600 1:400 0:100"},
      out2);
  const Findings f = parse(read_file(out2));
  EXPECT_EQ(f.at("uuid1"), uuids_[2]);
  EXPECT_EQ(f.at("alloc1:600"), "refused") << "600 MiB of the tenant's 1 GiB are held by the first";
  EXPECT_EQ(f.at("alloc1:400"), "ok");
  EXPECT_EQ(f.at("alloc0:100"), "ok");
  EXPECT_EQ(held_by(first)[2] + held_by(second)[2], 1000 * kMiB64);
  const slice::TenantView* t = tenant("c");
  ASSERT_NE(t, nullptr);
  for (const slice::TenantGpuView& g : t->gpus) {
    if (g.uuid == uuids_[2]) {
      EXPECT_EQ(g.used_bytes, 1000 * kMiB64);
    }
  }
  EXPECT_EQ(t->gpus.size(), 2u) << "cards 2 and 0, each once";
  release({first, second});
}

TEST_F(Devices, TwoTenantsOnDifferentCardsEachHoldTheirOwn) {
  std::string out1, out2;
  const pid_t a =
      start({"CUDA_VISIBLE_DEVICES=0", "SLICE_TENANT=d", "SLICE_MEMORY_LIMIT=1Gi", "ALLOC=0:1024 0:1"}, out1);
  const pid_t b =
      start({"CUDA_VISIBLE_DEVICES=1", "SLICE_TENANT=e", "SLICE_MEMORY_LIMIT=2Gi", "ALLOC=0:2048 0:1"}, out2);
  // Fastest first: ordinal 0 is card 1 (128 multiprocessors), ordinal 1 is card 3.
  EXPECT_EQ(parse(read_file(out1)).at("uuid0"), uuids_[1]);
  EXPECT_EQ(parse(read_file(out2)).at("uuid0"), uuids_[3]);
  EXPECT_EQ(held_by(a), (std::vector<std::uint64_t>{0, 1024 * kMiB64, 0, 0}));
  EXPECT_EQ(held_by(b), (std::vector<std::uint64_t>{0, 0, 0, 2048 * kMiB64}));
  EXPECT_EQ(parse(read_file(out1)).at("alloc0:1"), "refused");
  EXPECT_EQ(parse(read_file(out2)).at("alloc0:1"), "refused");
  const slice::TenantView* d = tenant("d");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->gpus.at(0).uuid, uuids_[1]);
  const slice::TenantView* e = tenant("e");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->gpus.at(0).uuid, uuids_[3]);
  release({a, b});
}

TEST_F(Devices, AProcessThatSeesNoDeviceBehavesAsWithoutLibslice) {
  for (const bool preloaded : {true, false}) {
    std::string out;
    std::vector<std::string> env = {"CUDA_VISIBLE_DEVICES=<empty>", "SLICE_TENANT=f"};
    if (!preloaded) env.push_back("LD_PRELOAD=");
    EXPECT_EQ(run_child("no-device", env, &out), 0) << out;
    EXPECT_NE(out.find("cuInit=100 count=none nvml_devices=4"), std::string::npos) << preloaded << ": " << out;
  }
  EXPECT_EQ(tenant("f"), nullptr) << "nothing joined the coordinator";
}

// ---- children ----

int probe() {
  if (cuInit(0)) return 1;
  int count = 0;
  cuDeviceGetCount(&count);
  std::printf("devices=%d\n", count);
  std::vector<CUcontext> contexts(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    CUuuid uuid{};
    std::size_t total = 0;
    if (cuDeviceGet(&dev, i) || cuDeviceGetUuid_v2(&uuid, dev) || cuDeviceTotalMem_v2(&total, dev) ||
        cuDevicePrimaryCtxRetain(&contexts[i], dev))
      return 2;
    char text[64];
    const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
    std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    std::printf("uuid%d=%s\ntotal%d=%zu\n", i, text, i, total);
  }
  // ALLOC: "ordinal:MiB" items, each allocated on that ordinal's primary context, kept.
  std::istringstream items(std::getenv("ALLOC") ? std::getenv("ALLOC") : "");
  for (std::string item; items >> item;) {
    const int ordinal = std::stoi(item.substr(0, item.find(':')));
    const std::size_t mib = std::stoull(item.substr(item.find(':') + 1));
    CUdeviceptr p = 0;
    if (ordinal >= count || cuCtxSetCurrent(contexts[ordinal])) return 3;
    std::printf("alloc%s=%s\n", item.c_str(), cuMemAlloc_v2(&p, mib * kMiB) == CUDA_SUCCESS ? "ok" : "refused");
  }
  // NVML in the same process, which numbers cards physically.
  if (nvmlInit_v2() == NVML_SUCCESS) {
    for (unsigned i = 0; i < 4; ++i) {
      nvmlDevice_t d = nullptr;
      nvmlMemory_t m{};
      if (nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS && nvmlDeviceGetMemoryInfo(d, &m) == NVML_SUCCESS)
        std::printf("nvml_total%u=%llu\n", i, m.total);
    }
  }
  std::printf("holding\n");
  std::fflush(stdout);
  const char* until = std::getenv("HOLD_UNTIL");
  for (int i = 0; until && i < 3000 && access(until, F_OK) != 0; ++i) usleep(10000);
  return 0;
}

int no_device() {
  const CUresult rc = cuInit(0);
  int count = -1;
  const bool counted = cuDeviceGetCount(&count) == CUDA_SUCCESS;
  unsigned nvml = 0;
  const bool listed = nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetCount_v2(&nvml) == NVML_SUCCESS;
  std::printf("cuInit=%d count=%s nvml_devices=%u\n", static_cast<int>(rc), counted ? "some" : "none",
              listed ? nvml : 0);
  return 0;
}

int child_main(const std::string& mode) {
  if (mode == "probe") return probe();
  if (mode == "no-device") return no_device();
  return 1;
}

}  // namespace

int main(int argc, char** argv) { return slice_test::shim_test_main(argc, argv, child_main); }
