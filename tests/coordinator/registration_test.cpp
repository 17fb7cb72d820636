// In-process unit tests of the coordinator: tenant names, registration of limits, device entries by
// UUID and the ledger's basic bookkeeping. Two Coordinator objects in one process open the tenant
// file separately, so their slot locks behave as two processes' would.
#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

TEST(TenantNames, AcceptsPlainNamesOnly) {
  for (const char* good : {"a", "inference-1", "A.b_c-9", "x.."}) EXPECT_TRUE(valid_tenant_name(good)) << good;
  EXPECT_TRUE(valid_tenant_name(std::string(kTenantNameMax, 'n')));
  for (const char* bad :
       {"", ".hidden", "..", "-flag", "a/b", "../x", "a b", "tab\t", "new\nline", "caf\xc3\xa9", "a*"})
    EXPECT_FALSE(valid_tenant_name(bad)) << bad;
  EXPECT_FALSE(valid_tenant_name(std::string(kTenantNameMax + 1, 'n')));
  EXPECT_FALSE(valid_tenant_name(std::string("a\0b", 3)));
}

using Registration = CoordinatorTest;

TEST_F(Registration, AFileRemovedWhileAJoinWaitsForItsLockIsCreatedAnew) {
  // slicectl rm holds the tenant's lock while it checks and unlinks; a process that opened the old
  // file and waits for that lock must start the tenant anew, not fail closed.
  std::string error;
  ASSERT_TRUE(prepare_coordinator_dir(dir_, error)) << error;
  auto holder = TenantFileHandle::open(dir_, "t", TenantFileHandle::Mode::create, error);
  ASSERT_NE(holder, nullptr) << error;
  ASSERT_TRUE(holder->lock_init(1'000'000'000ull));
  std::unique_ptr<TenantFileHandle> joined;
  std::string join_error;
  std::thread joiner([&] { joined = TenantFileHandle::open(dir_, "t", TenantFileHandle::Mode::create, join_error); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // it has the old file open and waits
  ASSERT_EQ(::unlink((dir_ + "/tenants/t").c_str()), 0);
  holder->unlock_init();
  joiner.join();
  ASSERT_NE(joined, nullptr) << join_error;
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/tenants/t").c_str(), &st), 0) << "a new file under the name";
  EXPECT_EQ(st.st_nlink, 1u);
}

TEST_F(Registration, BadTenantNameIsAClearError) {
  std::string error;
  EXPECT_EQ(join("../escape", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr);
  EXPECT_NE(error.find("is not a tenant name"), std::string::npos) << error;
}

TEST_F(Registration, FirstProcessSetsLimitsLaterOnesAreWarned) {
  std::vector<std::string> warnings;
  auto first = join("t", MemoryLimit::of_bytes(GiB), {0}, &warnings);
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(first->cap(0), GiB);

  auto second = join("t", MemoryLimit::of_bytes(2 * GiB), {0}, &warnings);
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("1.0 GiB"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("2.0 GiB"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("'t'"), std::string::npos) << warnings[0];
  EXPECT_EQ(second->cap(0), GiB) << "the registered limit holds";
  Refusal why;
  EXPECT_FALSE(second->reserve(0, GiB + 1, &why));
  EXPECT_EQ(why.cap, GiB);

  // The same limits again: no warning. Another compute share: a warning naming both.
  auto third = join("t", MemoryLimit::of_bytes(GiB), {0}, &warnings);
  ASSERT_NE(third, nullptr);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  JoinRequest r;
  r.dir = dir_;
  r.tenant = "t";
  r.devices.push_back(fake_gpu(0, MemoryLimit::of_bytes(GiB)));
  r.compute_share = 30;
  std::string error;
  auto fourth = Coordinator::join(r, error, warnings);
  ASSERT_NE(fourth, nullptr) << error;
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("100%"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("30%"), std::string::npos) << warnings[0];
}

TEST_F(Registration, NoCapRegisteredHoldsAgainstALaterWish) {
  auto first = join("t", std::nullopt);
  ASSERT_NE(first, nullptr);
  std::vector<std::string> warnings;
  auto second = join("t", MemoryLimit::of_bytes(GiB), {0}, &warnings);
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("none"), std::string::npos) << warnings[0];
  EXPECT_EQ(second->cap(0), kNoLimit);
}

TEST_F(Registration, PercentOfTheDevice) {
  auto c = join("t", MemoryLimit::of_device_billionths(MemoryLimit::kWholeDevice / 4));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->cap(0), kFakeGpuBytes / 4);
}

// A tenant registered by a process that saw GPU 0 only: a later process on GPU 1 (another
// CUDA_VISIBLE_DEVICES) must still be capped there, not find "no limit" registered for it.
TEST_F(Registration, GpuFirstMetLaterIsCappedToo) {
  auto first = join("t", MemoryLimit::of_bytes(GiB), {0});
  ASSERT_NE(first, nullptr);
  std::vector<std::string> warnings;
  auto second = join("t", MemoryLimit::of_bytes(GiB), {1}, &warnings);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  EXPECT_EQ(second->cap(0), GiB);
  EXPECT_FALSE(second->reserve(0, 2 * GiB));
  // And one that meets both afterwards sees the two registered caps, with no warning.
  auto third = join("t", MemoryLimit::of_bytes(GiB), {1, 0}, &warnings);
  ASSERT_NE(third, nullptr);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  EXPECT_EQ(third->cap(0), GiB);
  EXPECT_EQ(third->cap(1), GiB);
}

using Devices = CoordinatorTest;

TEST_F(Devices, SameUuidSharesOneEntryWhateverTheOrdinal) {
  auto a = join("t", MemoryLimit::of_bytes(GiB), {0, 1});
  auto b = join("t", MemoryLimit::of_bytes(GiB), {1, 0});  // another CUDA_VISIBLE_DEVICES order
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->reserve(1, 300 * MiB));  // a's device 1 is GPU 1
  EXPECT_EQ(b->usage(0), 300 * MiB);      // b's device 0 is GPU 1
  EXPECT_EQ(b->usage(1), 0u);
  EXPECT_FALSE(b->reserve(0, GiB - 200 * MiB));
  EXPECT_TRUE(b->reserve(1, GiB));
}

TEST_F(Devices, AllEntriesThenAClearError) {
  std::vector<int> all;
  for (int k = 0; k < kMaxDevices; ++k) all.push_back(k);
  auto full = join("t", MemoryLimit::of_bytes(GiB), all);
  ASSERT_NE(full, nullptr);
  for (int k = 0; k < kMaxDevices; ++k) ASSERT_TRUE(full->reserve(k, MiB)) << k;
  std::string error;
  ASSERT_EQ(reap_tenant(dir_, "t", error), 0) << error;  // so that the header holds a count
  TenantWatch watch(dir_, "t");
  ASSERT_TRUE(watch.ok());
  TenantHeader header_before;
  std::memcpy(static_cast<void*>(&header_before), &watch.file().header, sizeof header_before);

  auto more = join("t", MemoryLimit::of_bytes(GiB), {3, kMaxDevices}, nullptr, &error);
  EXPECT_EQ(more, nullptr);
  EXPECT_NE(error.find("already uses " + std::to_string(kMaxDevices) + " GPUs"), std::string::npos) << error;
  // The failed join gave its slot back, charged nothing, and wrote nothing into the header.
  EXPECT_EQ(std::memcmp(&header_before, &watch.file().header, sizeof header_before), 0);
  EXPECT_EQ(watch.file().header.recounts.load(), 1u);
  std::string view_error;
  auto views = read_coordinator(dir_, policy_dir_, view_error);
  const TenantView* v = find_tenant(views, "t");
  ASSERT_NE(v, nullptr) << view_error;
  EXPECT_EQ(v->processes.size(), 1u);
  EXPECT_EQ(v->dead_processes, 0);
  ASSERT_EQ(v->gpus.size(), static_cast<std::size_t>(kMaxDevices));
  for (const TenantGpuView& g : v->gpus) EXPECT_EQ(g.used_bytes, MiB) << g.uuid;
  // A process of the known GPUs still joins.
  EXPECT_NE(join("t", MemoryLimit::of_bytes(GiB), {kMaxDevices - 1}), nullptr);
}

using Ledger = CoordinatorTest;

TEST_F(Ledger, ReserveReleaseAndRefusalFigures) {
  auto a = join("t", MemoryLimit::of_bytes(GiB));
  auto b = join("t", MemoryLimit::of_bytes(GiB));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(a->reserve(0, 600 * MiB));
  Refusal why;
  EXPECT_FALSE(b->reserve(0, 600 * MiB, &why));
  EXPECT_EQ(why.usage, 600 * MiB);
  EXPECT_EQ(why.cap, GiB);
  EXPECT_TRUE(b->reserve(0, GiB - 600 * MiB));  // exactly up to the cap
  EXPECT_FALSE(b->reserve(0, 1));
  a->release(0, 600 * MiB);
  EXPECT_EQ(a->usage(0), GiB - 600 * MiB);
  EXPECT_TRUE(b->reserve(0, 1));
  EXPECT_FALSE(b->reserve(0, kNoLimit)) << "a huge request must not wrap around the cap";
}

TEST_F(Ledger, ADoubleFreeNeverFreesAnotherProcesssUsage) {
  auto a = join("t", MemoryLimit::of_bytes(GiB));
  auto b = join("t", MemoryLimit::of_bytes(GiB));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->reserve(0, 100 * MiB));
  ASSERT_TRUE(b->reserve(0, 200 * MiB));
  b->release(0, 200 * MiB);
  b->release(0, 200 * MiB);  // again
  b->release(0, GiB);
  EXPECT_EQ(a->usage(0), 100 * MiB);
  EXPECT_EQ(a->ledger().mine(0), 100 * MiB);
}

TEST_F(Ledger, LeavingGivesBackMemoryAndSlot) {
  auto a = join("t", MemoryLimit::of_bytes(GiB));
  ASSERT_NE(a, nullptr);
  {
    auto b = join("t", MemoryLimit::of_bytes(GiB));
    ASSERT_NE(b, nullptr);
    ASSERT_TRUE(b->reserve(0, 700 * MiB));
  }
  EXPECT_EQ(a->usage(0), 0u);
  TenantWatch watch(dir_, "t");
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ(watch.live_slots(), 1);
  EXPECT_TRUE(a->reserve(0, GiB));
}

TEST_F(Ledger, NoCapMeansNoRefusal) {
  auto a = join("t", std::nullopt);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->cap(0), kNoLimit);
  EXPECT_TRUE(a->reserve(0, 1ull << 50));
  EXPECT_FALSE(a->reserve(0, kNoLimit)) << "the total must not wrap around";
}

}  // namespace
}  // namespace slice::test
