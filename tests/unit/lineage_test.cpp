// Lineage markers (libslice/coordinator/lineage.h): a marker counts only where nobody but its
// maker's user could have made it. Run as root, which may chown the folder to another user.
#include "lineage.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tenant_file.h"

namespace {

class Markers : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("SLICE_TEST_TMPDIR");
    dir_ = std::string(base != nullptr ? base : "/tmp") + "/lineage-unit";
    std::string error;
    ASSERT_TRUE(slice::prepare_coordinator_dir(dir_, error)) << error;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A marker that names this process's parent as a member of `tenant` (made by root, who may).
  void plant_parent_marker(const std::string& tenant) {
    const auto parent = slice::identity_of(getppid());
    ASSERT_TRUE(parent.has_value());
    const std::string name = std::to_string(parent->proc_instance) + "." + std::to_string(parent->pid) + "." +
                             std::to_string(parent->start_ticks);
    ASSERT_EQ(symlink(tenant.c_str(), (dir_ + "/members/" + name).c_str()), 0);
  }
  std::string dir_;
};

TEST_F(Markers, AParentsMarkerNamesItsTenant) {
  plant_parent_marker("planted");
  EXPECT_EQ(slice::inherited_tenant(dir_).value_or("(none)"), "planted");
}

TEST_F(Markers, AMembersFolderAnotherUserOwnsOrAnyoneMayRewriteIsNotBelieved) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the folder away";
  plant_parent_marker("planted");
  const std::string members = dir_ + "/members";
  // Another user's folder: they may remove and replace anyone's marker in it.
  ASSERT_EQ(chown(members.c_str(), 1000, 1000), 0);
  EXPECT_FALSE(slice::inherited_tenant(dir_).has_value()) << "a marker in another user's members/ was believed";
  std::string error;
  EXPECT_FALSE(slice::mark_member(dir_, "mine", error));
  EXPECT_NE(error.find("members"), std::string::npos) << error;
  // Root's, but writable by all and not sticky: anyone may replace anyone's marker.
  ASSERT_EQ(chown(members.c_str(), 0, 0), 0);
  ASSERT_EQ(chmod(members.c_str(), 0777), 0);
  EXPECT_FALSE(slice::inherited_tenant(dir_).has_value()) << "a marker in a members/ anyone may rewrite was believed";
  ASSERT_EQ(chmod(members.c_str(), 01777), 0);
  EXPECT_EQ(slice::inherited_tenant(dir_).value_or("(none)"), "planted");
}

TEST_F(Markers, ThisProcessIsNamedAsItsProcNumbersIt) {
  const auto self = slice::own_identity();
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->pid, getpid()) << "in the test's own namespace, /proc numbers it as getpid() does";
  EXPECT_EQ(self->parent, getppid());
  struct stat proc {};
  ASSERT_EQ(stat("/proc/self", &proc), 0);
  EXPECT_EQ(self->proc_instance, static_cast<std::uint64_t>(proc.st_dev));
}

}  // namespace
