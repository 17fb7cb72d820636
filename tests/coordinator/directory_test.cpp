// The coordinator directory: missing (created shared and sticky), a file in its place, read-only,
// or on a full disk. Each must be a clear error at join, and nothing else may be harmed.
#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t GiB = 1ull << 30;

using Directory = CoordinatorTest;

mode_t mode_of(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

std::string read_all(const std::string& path) {
  std::string text;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  char buf[4096];
  for (ssize_t n; fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  if (fd >= 0) close(fd);
  return text;
}

TEST_F(Directory, MissingIsCreatedSharedAndSticky) {
  dir_ = root_ + "/deep/er/coordinator";
  const mode_t old_umask = umask(077);  // a strict umask must not make it private
  std::string error;
  const bool ok = prepare_coordinator_dir(dir_, error);
  umask(old_umask);
  ASSERT_TRUE(ok) << error;
  EXPECT_EQ(mode_of(dir_), 01777u);
  EXPECT_EQ(mode_of(dir_ + "/tenants"), 01777u);
  auto c = join("t", MemoryLimit::of_bytes(GiB));
  EXPECT_NE(c, nullptr);
  // Preparing again is harmless.
  EXPECT_TRUE(prepare_coordinator_dir(dir_, error)) << error;
}

TEST_F(Directory, RelativePathIsRefused) {
  std::string error;
  EXPECT_FALSE(prepare_coordinator_dir("relative/dir", error));
  EXPECT_NE(error.find("not an absolute path"), std::string::npos) << error;
}

TEST_F(Directory, AFileInItsPlaceIsAClearErrorAndIsLeftAlone) {
  write_file(dir_, "precious\n");
  std::string error;
  EXPECT_FALSE(prepare_coordinator_dir(dir_, error));
  EXPECT_NE(error.find("not a directory"), std::string::npos) << error;
  EXPECT_EQ(join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr);
  EXPECT_NE(error.find(dir_), std::string::npos) << error;
  EXPECT_EQ(read_all(dir_), "precious\n");
  // The same for its tenants/ folder.
  std::filesystem::remove(dir_);
  std::filesystem::create_directories(dir_);
  write_file(dir_ + "/tenants", "precious too\n");
  EXPECT_FALSE(prepare_coordinator_dir(dir_, error));
  EXPECT_NE(error.find("tenants exists and is not a directory"), std::string::npos) << error;
  EXPECT_EQ(read_all(dir_ + "/tenants"), "precious too\n");
}

// As root, permission bits do not stop us: a read-only mount does. Unprivileged, chmod does.
TEST_F(Directory, ReadOnlyIsAClearErrorAndReadersStillWork) {
  const std::string mnt = root_ + "/ro";
  dir_ = mnt + "/coordinator";
  if (is_root()) {
    if (!mount_tmpfs(mnt, "size=4m")) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  } else {
    std::filesystem::create_directories(mnt);
  }
  {
    auto c = join("t", MemoryLimit::of_bytes(GiB));  // a tenant that existed before it turned read-only
    ASSERT_NE(c, nullptr);
  }
  if (is_root()) {
    ASSERT_EQ(mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0) << std::strerror(errno);
  } else {
    chmod((dir_ + "/tenants").c_str(), 0555);
    chmod(mnt.c_str(), 0555);
  }
  std::string error;
  EXPECT_FALSE(prepare_coordinator_dir(dir_, error));
  EXPECT_NE(error.find("cannot write in " + dir_ + "/tenants"), std::string::npos) << error;
  EXPECT_EQ(join("u", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr);
  EXPECT_NE(error.find(dir_), std::string::npos) << error;
  // A missing coordinator below a read-only folder: cannot be created.
  EXPECT_FALSE(prepare_coordinator_dir(mnt + "/other", error));
  EXPECT_NE(error.find("cannot create " + mnt + "/other"), std::string::npos) << error;
  // The tools still read what is there.
  auto views = read_coordinator(dir_, policy_dir_, error);
  ASSERT_EQ(views.size(), 1u) << error;
  EXPECT_TRUE(views[0].readable) << views[0].problem;
  if (!is_root()) chmod(mnt.c_str(), 0755), chmod((dir_ + "/tenants").c_str(), 01777);
}

TEST_F(Directory, FullDiskIsAClearErrorAndHarmsNothingElse) {
  if (!is_root()) GTEST_SKIP() << "needs root to mount a tiny tmpfs";
  const std::string mnt = root_ + "/full";
  // 64 KiB: less than one tenant file (sizeof(TenantFile) bytes).
  ASSERT_GT(sizeof(TenantFile), 64u * 1024);
  if (!mount_tmpfs(mnt, "size=64k")) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  dir_ = mnt + "/coordinator";
  std::string error;
  ASSERT_TRUE(prepare_coordinator_dir(dir_, error)) << error;
  const std::string canary = mnt + "/canary";
  const std::string canary_text(16 * 1024, 'c');
  write_file(canary, canary_text);

  EXPECT_EQ(join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr);
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  EXPECT_NE(error.find(tenant_path("t")), std::string::npos) << error;
  EXPECT_EQ(read_all(canary), canary_text);
  // What is left of the tenant takes no room, and the tools say what it is, without crashing.
  struct stat st {};
  if (stat(tenant_path("t").c_str(), &st) == 0) {
    EXPECT_EQ(st.st_size, 0);
  }
  auto views = read_coordinator(dir_, policy_dir_, error);
  for (const TenantView& v : views) {
    EXPECT_FALSE(v.readable);
    EXPECT_FALSE(v.problem.empty());
  }
  // Once there is room, the same tenant joins.
  std::filesystem::remove(canary);
  ASSERT_EQ(mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT, "size=4m"), 0) << std::strerror(errno);
  auto c = join("t", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error);
  ASSERT_NE(c, nullptr) << error;
  EXPECT_TRUE(c->reserve(0, GiB));
}

}  // namespace
}  // namespace slice::test
