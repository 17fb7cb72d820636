// Hostile coordinator folders and hostile processes: what root does in a coordinator folder a user
// made (links to root's files, a planted policy generation counter), hard links planted in a
// root-made one, the policy's temporary name, and forked children of a member (which must neither
// hide their parent's death nor give back their parent's memory).
#include <grp.h>
#include <linux/fs.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cctype>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "policy.h"
#include "test_support.h"

namespace slice::test {
namespace {

constexpr std::uint64_t MiB = 1ull << 20, GiB = 1ull << 30;
constexpr int kUserA = 1000, kUserB = 1001;

// Everything about a file that root's operations must leave alone.
struct FileState {
  bool exists = false;
  std::string content;
  uid_t uid = 0;
  gid_t gid = 0;
  mode_t mode = 0;
  nlink_t links = 0;
  bool operator==(const FileState&) const = default;
};

FileState file_state(const std::string& path) {
  FileState s;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.uid = st.st_uid;
  s.gid = st.st_gid;
  s.mode = st.st_mode & 07777;
  s.links = st.st_nlink;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  s.content = text.str();
  return s;
}

std::ostream& operator<<(std::ostream& o, const FileState& s) {
  std::string shown;  // printable, and short: a rebuilt tenant file is megabytes of zeroes
  for (char c : s.content.substr(0, 60)) shown += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return o << (s.exists ? "" : "(missing) ") << "uid=" << s.uid << " gid=" << s.gid << " mode=0" << std::oct << s.mode
           << std::dec << " links=" << s.links << " " << s.content.size() << " bytes '" << shown
           << (s.content.size() > 60 ? "...'" : "'");
}

std::set<std::string> entries(const std::string& folder) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(folder, ec)) out.insert(e.path().filename().string());
  return out;
}

// What a forked test child reports through its pipe.
struct ForkReport {
  pid_t child = 0, grandchild = 0;
  int grandchild_status = -1;         // in exit mode: its exit status (0: its reservation was refused)
  std::uint64_t usage = 0, mine = 0;  // the child's view after the grandchild exited
  int still_member = 0;               // the child can still reserve up to, and not past, its cap
};

// Processes the test forks itself, killed and reaped at the end. The test process adopts orphans (the
// grandchildren) while this lives, so it can reap them too.
class Family {
 public:
  Family() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~Family() {
    for (pid_t p : {grandchild, child})
      if (p > 0) kill(p, SIGKILL);
    for (pid_t p : {child, grandchild})
      if (p > 0) waitpid(p, nullptr, 0);  // the grandchild is ours once the child is dead
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    if (from >= 0) close(from);
  }
  bool read_report(ForkReport& r, int timeout_ms = 10'000) {
    std::size_t got = 0;
    char* out = reinterpret_cast<char*>(&r);
    const auto t0 = std::chrono::steady_clock::now();
    while (got < sizeof r) {
      const int left = timeout_ms - static_cast<int>(seconds_since(t0) * 1000);
      pollfd p{from, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, left) <= 0) return false;
      const ssize_t n = read(from, out + got, sizeof r - got);
      if (n <= 0) return false;
      got += static_cast<std::size_t>(n);
    }
    return true;
  }
  pid_t child = -1, grandchild = -1;
  int from = -1;
};

class Hostile : public CoordinatorTest {
 protected:
  void SetUp() override {
    CoordinatorTest::SetUp();
    if (!can_switch_user()) return;
    // The test's temporary folders are root's and private: open them (only them) to other users.
    chmod(root_.c_str(), 0755);
    if (const char* base = std::getenv("SLICE_TEST_TMPDIR")) chmod(base, 0755);
    users_ = shell_as(kUserA, "test -x " + std::string(worker_path())) == 0 &&
             shell_as(kUserB, "test -x " + std::string(worker_path())) == 0;
  }
  int shell_as(int uid, const std::string& script) { return run_command(as_user(uid, {"/bin/sh", "-c", script})); }
  Process& spawn_as(int uid, const std::string& tenant, const std::vector<std::string>& options,
                    const std::vector<std::string>& command) {
    return spawn(as_user(uid, worker(dir_, tenant, options, command)));
  }
  // The coordinator folder moves into a folder of user A's, where A (not root) will make it.
  void coordinator_in_users_home() {
    const std::string home = root_ + "/home";
    ASSERT_EQ(mkdir(home.c_str(), 0755), 0) << std::strerror(errno);
    ASSERT_EQ(chown(home.c_str(), kUserA, kUserA), 0) << std::strerror(errno);
    dir_ = home + "/coordinator";
    policy_dir_ = home + "/policy";  // where coordinator_worker looks by default: beside it
  }
  // A folder only root may enter, holding a root file only root may read: what a planted link aims at.
  std::string make_root_secret(const std::string& name) {
    const std::string folder = root_ + "/secret";
    mkdir(folder.c_str(), 0700);
    const std::string path = folder + "/" + name;
    write_file(path, "root's own content, not a tenant file\n", 0600);
    return path;
  }

  void race_tenants_link(const std::function<bool()>& op, const std::string& secret, int& attempts, int& done);

  bool users_ = false;  // root, setpriv, and users A and B can run the worker
};

#define NEEDS_ROOT() \
  if (!is_root()) GTEST_SKIP() << "needs root"
#define NEEDS_USERS() \
  if (!users_) GTEST_SKIP() << "needs root and setpriv to act as users " << kUserA << " and " << kUserB

// ---- 1. a coordinator or policy folder that a user made ----

// A user makes the coordinator folder and points its tenants/ at a root-only folder, and puts a link
// to it in place of the policy folder: root's adoption or policy write would otherwise create,
// truncate or chown root's files there.
TEST_F(Hostile, RootDoesNotFollowAUsersTenantsLinkToRootsFiles) {
  NEEDS_USERS();
  ASSERT_NO_FATAL_FAILURE(coordinator_in_users_home());
  const std::string secret = make_root_secret("shadow");
  const FileState before = file_state(secret);
  ASSERT_EQ(shell_as(kUserA, "mkdir -m 1777 " + dir_ + " && ln -s " + root_ + "/secret " + dir_ + "/tenants && ln -s " +
                                 root_ + "/secret " + policy_dir_),
            0);

  std::string error;
  EXPECT_FALSE(adopt_tenant_file(dir_, "shadow", 65534, error)) << "root adopted a file through a user's link";
  EXPECT_NE(error.find(dir_), std::string::npos) << error;
  std::printf("adopt_tenant_file: %s\n", error.c_str());
  error.clear();
  Policy p;
  p.memory = MemoryLimit::of_bytes(GiB);
  EXPECT_FALSE(write_policy(policy_dir_, "shadow", p, error)) << "root wrote policy through a user's link";
  EXPECT_NE(error.find(policy_dir_), std::string::npos) << error;
  std::printf("write_policy: %s\n", error.c_str());
  error.clear();
  EXPECT_FALSE(prepare_policy_folder(policy_dir_, error));
  EXPECT_NE(error.find(policy_dir_), std::string::npos) << error;

  EXPECT_EQ(file_state(secret), before) << "root's file was changed";
  EXPECT_EQ(entries(root_ + "/secret"), std::set<std::string>{"shadow"}) << "root made files in its own folder";
}

// Under a folder a user owns, a root-owned policy folder is not trusted: the user could rename it
// away and put its own in its place.
TEST_F(Hostile, APolicyFolderInAUsersFolderIsUntrusted) {
  NEEDS_USERS();
  ASSERT_NO_FATAL_FAILURE(coordinator_in_users_home());
  ASSERT_EQ(shell_as(kUserA, "mkdir -m 1777 " + dir_ + " && mkdir -m 1777 " + dir_ + "/tenants"), 0);
  // A root policy there, as root made it (before the check, say).
  const std::string folder = policy_dir_, path = folder + "/x";
  ASSERT_EQ(mkdir(folder.c_str(), 0755), 0) << std::strerror(errno);
  write_file(path, "memory_limit = 1Gi\n", 0644);
  const FileState before = file_state(path);
  const std::string home = root_ + "/home";

  Policy read;
  std::string message;
  EXPECT_EQ(read_policy(policy_dir_, "x", read, message), PolicyStatus::untrusted) << message;
  EXPECT_NE(message.find(home + ", above " + policy_dir_ + ", is not root's"), std::string::npos) << message;

  Policy p;
  p.memory = MemoryLimit::of_bytes(2 * GiB);
  std::string error;
  EXPECT_FALSE(write_policy(policy_dir_, "x", p, error));
  EXPECT_NE(error.find(home + ", above " + policy_dir_ + ", is not root's"), std::string::npos) << error;
  EXPECT_EQ(file_state(path), before);
  EXPECT_EQ(entries(folder), std::set<std::string>{"x"}) << "no temporary file, no generation counter";

  // Its processes do not take the policy: their own (environment) cap holds.
  Process& w = spawn_as(kUserA, "x", {"--memory", "1Mi"}, {"reserve-once", "2Mi"});
  EXPECT_EQ(w.read_line(), "refused usage=0 cap=" + std::to_string(MiB));
}

// Adoption makes a tenant file root's so that its tenant cannot delete it and start again from zero
// usage. In a folder the user owns, it can (and between root's checks it can swap tenants/ for a
// link): root must refuse to adopt there, as it refuses to write policy.
TEST_F(Hostile, RootDoesNotAdoptInAUsersCoordinatorFolder) {
  NEEDS_USERS();
  ASSERT_NO_FATAL_FAILURE(coordinator_in_users_home());
  ASSERT_EQ(shell_as(kUserA, "mkdir -m 1777 " + dir_ + " && mkdir -m 1777 " + dir_ + "/tenants"), 0);
  std::string error;
  EXPECT_FALSE(adopt_tenant_file(dir_, "t", kUserA, error)) << "root adopted a tenant file in a user's folder";
  EXPECT_NE(error.find(dir_), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(tenant_path("t")));
}

// The same attack as a race: user A keeps swapping a real tenants/ folder and a link to root's folder
// (renameat2 RENAME_EXCHANGE), so that root's checks may see the folder and its open the link. Runs
// `op` as root over and over for half a second, or until root's file changes; counts its successes.
void Hostile::race_tenants_link(const std::function<bool()>& op, const std::string& secret, int& attempts, int& done) {
  ASSERT_NO_FATAL_FAILURE(coordinator_in_users_home());
  const FileState before = file_state(secret);
  const std::string tenants = dir_ + "/tenants", alt = dir_ + "/alt";
  ASSERT_EQ(shell_as(kUserA, "mkdir -m 1777 " + dir_ + " " + tenants + " && ln -s " + root_ + "/secret " + alt), 0);
  std::fflush(nullptr);
  Family attacker;
  attacker.child = fork();
  ASSERT_GE(attacker.child, 0);
  if (attacker.child == 0) {  // user A, swapping until killed
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(30);
    if (setgroups(0, nullptr) != 0 || setresgid(kUserA, kUserA, kUserA) != 0 || setresuid(kUserA, kUserA, kUserA) != 0)
      _exit(1);
    for (;;) syscall(SYS_renameat2, AT_FDCWD, tenants.c_str(), AT_FDCWD, alt.c_str(), RENAME_EXCHANGE);
  }
  attempts = done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 0.5 && file_state(secret) == before) {
    done += op();
    ++attempts;
  }
}

// Adoption (which also chowns and chmods the file) in the user's folder, under the swaps.
TEST_F(Hostile, RootDoesNotFollowATenantsLinkSwappedInDuringAdoption) {
  NEEDS_USERS();
  const std::string secret = make_root_secret("shadow");
  const FileState before = file_state(secret);
  int attempts = 0, adopted = 0;
  ASSERT_NO_FATAL_FAILURE(race_tenants_link(
      [&] {
        std::string error;
        return adopt_tenant_file(dir_, "shadow", std::nullopt, error);
      },
      secret, attempts, adopted));
  std::printf("%d adoptions tried under the swaps, %d done\n", attempts, adopted);
  EXPECT_EQ(file_state(secret), before) << "root's file was rebuilt as a tenant file through the swapped-in link";
  EXPECT_EQ(adopted, 0);
}

// A root process of tenant "shadow" (any process that joins as root: a job run by root) in a
// coordinator folder that a user made first (the default /dev/shm/libslice is anyone's to make).
TEST_F(Hostile, ARootProcessDoesNotFollowATenantsLinkSwappedInDuringJoin) {
  NEEDS_USERS();
  const std::string secret = make_root_secret("shadow");
  const FileState before = file_state(secret);
  int attempts = 0, joined = 0;
  ASSERT_NO_FATAL_FAILURE(race_tenants_link([&] { return join("shadow", MemoryLimit::of_bytes(GiB)) != nullptr; },
                                            secret, attempts, joined));
  std::printf("%d joins tried under the swaps, %d done\n", attempts, joined);
  EXPECT_EQ(file_state(secret), before) << "root's file was rebuilt as a tenant file through the swapped-in link";
}

// ---- 2. a hard link planted in a root-made coordinator folder ----

TEST_F(Hostile, AHardLinkPlantedAsATenantFileIsNeverOpenedForWriting) {
  NEEDS_ROOT();
  std::string error;
  ASSERT_TRUE(prepare_coordinator_dir(dir_, error)) << error;
  const std::string secret = make_root_secret("data");
  ASSERT_EQ(link(secret.c_str(), tenant_path("victim").c_str()), 0) << std::strerror(errno);
  const FileState before = file_state(secret);
  ASSERT_EQ(before.links, 2u);

  EXPECT_EQ(join("victim", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr) << "root joined a hard link";
  EXPECT_NE(error.find("other hard links"), std::string::npos) << error;
  std::printf("join: %s\n", error.c_str());
  error.clear();
  EXPECT_EQ(reap_tenant(dir_, "victim", error), -1);
  EXPECT_NE(error.find("other hard links"), std::string::npos) << error;
  EXPECT_EQ(file_state(secret), before) << "the linked file was changed";
  // Adoption never changes a file where it is: it puts a new one in the name's place, and the
  // linked file loses that name and nothing else.
  error.clear();
  ASSERT_TRUE(adopt_tenant_file(dir_, "victim", kUserA, error)) << error;
  FileState unlinked = before;
  unlinked.links = 1;
  EXPECT_EQ(file_state(secret), unlinked) << "the linked file was changed";
  const FileState adopted = file_state(tenant_path("victim"));
  EXPECT_EQ(adopted.uid, 0u);
  EXPECT_EQ(adopted.links, 1u);
  EXPECT_NE(adopted.content, before.content);

  // A symbolic link in its place is not followed either.
  ASSERT_EQ(symlink(secret.c_str(), tenant_path("sym").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(join("sym", MemoryLimit::of_bytes(GiB), {0}, nullptr, &error), nullptr) << "root joined a symbolic link";
  ASSERT_TRUE(adopt_tenant_file(dir_, "sym", kUserA, error)) << error;
  EXPECT_EQ(file_state(secret), unlinked) << "the linked file was changed";
  struct stat st {};
  ASSERT_EQ(lstat(tenant_path("sym").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link is replaced by a tenant file of root's";
}

// ---- 3. a planted policy generation counter ----

// A user makes the policy folder with its own .generation, and truncates and rewrites it under
// another user's running processes: were it mapped, they would die of SIGBUS, or see generations it
// chose. It is never mapped, and no cap depends on it.
TEST_F(Hostile, APlantedGenerationCounterNeitherCrashesNorMovesCaps) {
  NEEDS_USERS();
  ASSERT_NO_FATAL_FAILURE(coordinator_in_users_home());
  const std::string counter = policy_dir_ + "/.generation";
  ASSERT_EQ(shell_as(kUserA, "mkdir -m 1777 " + dir_ + " " + dir_ + "/tenants " + dir_ + "/locks && mkdir -m 0755 " +
                                 policy_dir_ + " && head -c 8 /dev/zero > " + counter +
                                 " && printf 'memory_limit = 1Ti\\n' > " + policy_dir_ + "/c"),
            0);
  ASSERT_EQ(file_state(counter).content.size(), 8u);

  Process& hammer = spawn_as(kUserB, "t", {"--memory", "1Mi", "--sync"}, {"hammer", "3", "4096"});
  ASSERT_EQ(hammer.read_line(), "joined");  // it has looked for the counter already
  hammer.send_line();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(shell_as(kUserA, "for i in 1 2 3 4; do : > " + counter + "; sleep 0.15; printf '" + std::string(8, ' ') +
                                 "' | tr ' ' '\\377' > " + counter + "; sleep 0.15; done"),
            0);
  const double planting = seconds_since(t0);
  EXPECT_EQ(file_state(counter).content, std::string(8, '\xff'));
  EXPECT_LT(planting, 2.5) << "the hammer may have finished before the last rewrite";

  // A newcomer, with the counter all ones (and a user's policy beside it), keeps its own 1 MiB cap.
  Process& over = spawn_as(kUserB, "c", {"--memory", "1Mi"}, {"reserve-once", std::to_string(MiB + 1)});
  EXPECT_EQ(over.read_line(), "refused usage=0 cap=" + std::to_string(MiB));
  Process& fits = spawn_as(kUserB, "c", {"--memory", "1Mi"}, {"reserve-once", "1Mi"});
  EXPECT_EQ(fits.read_line(), "ok");

  const auto summary = hammer.read_line(10'000);
  ASSERT_TRUE(summary.has_value()) << "the hammer died (exit " << hammer.wait() << ")";
  std::printf("hammer under a planted counter: %s\n", summary->c_str());
  EXPECT_EQ(hammer.wait(), 0) << "128+" << SIGBUS << " is SIGBUS";
  EXPECT_GT(field(*summary, "ops"), 0u);
  EXPECT_EQ(field(*summary, "violations"), 0u);
  EXPECT_EQ(field(*summary, "refused"), 0u) << *summary;
}

// ---- 4. the policy's temporary name ----

// The temporary file was once "<tenant>.tmp": tenant "x"'s write went through tenant "x.tmp"'s policy
// file. It is ".tmp.<tenant>" now, which no tenant can be named.
TEST_F(Hostile, APolicyWriteNeverTouchesAnotherTenantsPolicy) {
  NEEDS_ROOT();
  std::string error;
  ASSERT_TRUE(prepare_coordinator_dir(dir_, error)) << error;
  Policy p1, p2;
  p1.memory = MemoryLimit::of_bytes(GiB);
  p2.memory = MemoryLimit::of_bytes(2 * GiB);
  ASSERT_TRUE(write_policy(policy_dir_, "x.tmp", p1, error)) << error;
  ASSERT_TRUE(write_policy(policy_dir_, "x", p2, error)) << error;
  ASSERT_TRUE(write_policy(policy_dir_, "x", p2, error)) << error;  // over an existing one too

  Policy read;
  std::string message;
  ASSERT_EQ(read_policy(policy_dir_, "x.tmp", read, message), PolicyStatus::ok) << message;
  EXPECT_EQ(read.memory, p1.memory);
  ASSERT_EQ(read_policy(policy_dir_, "x", read, message), PolicyStatus::ok) << message;
  EXPECT_EQ(read.memory, p2.memory);
  EXPECT_EQ(entries(policy_dir_), (std::set<std::string>{".generation", "x", "x.tmp"}));

  EXPECT_FALSE(valid_tenant_name(".tmp.x"));
  EXPECT_FALSE(write_policy(policy_dir_, ".tmp.x", p1, error));
  EXPECT_EQ(read_policy(policy_dir_, "x", read, message), PolicyStatus::ok) << message;
  EXPECT_EQ(read.memory, p2.memory);
}

// ---- 5. fork ----

// The member of the forked test child; a static, so that exit() in a grandchild destroys it.
std::unique_ptr<Coordinator> g_member;

using Forks = Hostile;

enum class GrandchildDoes { sleep, exit };

// Forks a child that joins tenant "t" (1 GiB cap), reserves 512 MiB and forks a grandchild that
// sleeps, or that tries to reserve and release and then calls exit(); the child reports through a pipe
// and then sleeps until killed.
void start_family(Family& f, GrandchildDoes what, const std::function<std::unique_ptr<Coordinator>()>& join_t) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  std::fflush(nullptr);  // or exit() in a grandchild writes our buffered output again
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(30);
    close(fds[0]);
    g_member = join_t();
    if (!g_member || !g_member->reserve(0, 512 * MiB)) _exit(10);
    ForkReport r;
    r.child = getpid();
    std::fflush(nullptr);
    r.grandchild = fork();
    if (r.grandchild == 0) {
      alarm(30);  // alarms are not inherited: it outlives the child on purpose, but not the test
      if (what == GrandchildDoes::sleep)
        for (;;) pause();
      const bool took = g_member->reserve(0, 1);
      g_member->release(0, 512 * MiB);
      exit(took ? 1 : 0);  // runs g_member's destructor
    }
    if (what == GrandchildDoes::exit) {
      int status = 0;
      waitpid(r.grandchild, &status, 0);
      r.grandchild_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      r.usage = g_member->usage(0);
      r.mine = g_member->ledger().mine(0);
      r.still_member = !g_member->reserve(0, 512 * MiB + 1) && g_member->reserve(0, 512 * MiB);
      if (r.still_member) g_member->release(0, 512 * MiB);
    }
    if (write(fds[1], &r, sizeof r) != sizeof r) _exit(11);
    for (;;) pause();
  }
  close(fds[1]);
  f.child = child;
  f.from = fds[0];
}

// A forked child (no exec) that outlives its parent must not keep the parent's slot looking alive: the
// parent's 512 MiB are back at once, for the whole cap.
TEST_F(Forks, AForkedChildDoesNotHideItsParentsDeath) {
  Family f;
  ASSERT_NO_FATAL_FAILURE(
      start_family(f, GrandchildDoes::sleep, [&] { return join("t", MemoryLimit::of_bytes(GiB)); }));
  ForkReport r;
  ASSERT_TRUE(f.read_report(r)) << "the child did not report";
  f.grandchild = r.grandchild;
  ASSERT_GT(r.grandchild, 0);
  TenantWatch watch(dir_, "t");
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ(watch.total(), 512 * MiB);

  const auto t0 = std::chrono::steady_clock::now();
  kill(f.child, SIGKILL);
  waitpid(f.child, nullptr, 0);
  f.child = -1;
  std::string error;
  int reaped = 0;
  while ((reaped = reap_tenant(dir_, "t", error)) == 0 && seconds_since(t0) < 1)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double took = seconds_since(t0);
  std::printf("the forked parent's death was reaped after %.3f ms\n", took * 1e3);
  EXPECT_GE(reaped, 1) << error << ": the grandchild keeps its parent's slot alive";
  EXPECT_LT(took, 1.0);
  EXPECT_EQ(watch.total(), 0u);
  EXPECT_EQ(watch.live_slots(), 0);
  EXPECT_EQ(kill(r.grandchild, 0), 0) << "the grandchild should still be alive";

  Process& whole = spawn_worker("t", {"--memory", "1Gi"}, {"reserve-once", "1Gi"});
  EXPECT_EQ(whole.read_line(), "ok");
}

// A forked child that exits normally (destructors run) neither gives back its parent's memory nor
// frees its slot; nor may it reserve on its parent's slot.
TEST_F(Forks, AForkedChildThatExitsDoesNotReleaseItsParentsMemory) {
  Family f;
  ASSERT_NO_FATAL_FAILURE(start_family(f, GrandchildDoes::exit, [&] { return join("t", MemoryLimit::of_bytes(GiB)); }));
  ForkReport r;
  ASSERT_TRUE(f.read_report(r)) << "the child did not report";
  EXPECT_EQ(r.grandchild_status, 0) << "1: the forked grandchild could reserve";
  EXPECT_EQ(r.usage, 512 * MiB);
  EXPECT_EQ(r.mine, 512 * MiB);
  EXPECT_EQ(r.still_member, 1) << "the child lost its cap or its membership";
  TenantWatch watch(dir_, "t");
  ASSERT_TRUE(watch.ok());
  EXPECT_EQ(watch.total(), 512 * MiB);
  EXPECT_EQ(watch.live_slots(), 1);
  EXPECT_EQ(watch.live_sum(), 512 * MiB) << "the child's slot no longer looks alive";
  std::string error;
  EXPECT_EQ(reap_tenant(dir_, "t", error), 0) << error;
  EXPECT_EQ(watch.total(), 512 * MiB);

  kill(f.child, SIGKILL);
  waitpid(f.child, nullptr, 0);
  f.child = -1;
  EXPECT_EQ(reap_tenant(dir_, "t", error), 1) << error;
  EXPECT_EQ(watch.total(), 0u);
}

// ---- 6. adoption's modes ----

TEST_F(Hostile, AdoptionWithoutAGroupLeavesTheFileWritableByRootAlone) {
  NEEDS_ROOT();
  std::string error;
  ASSERT_TRUE(adopt_tenant_file(dir_, "a", std::nullopt, error)) << error;
  FileState a = file_state(tenant_path("a"));
  EXPECT_EQ(a.uid, 0u);
  EXPECT_EQ(a.gid, 0u);
  EXPECT_EQ(a.mode, 0644u);

  ASSERT_TRUE(adopt_tenant_file(dir_, "b", kUserA, error)) << error;
  FileState b = file_state(tenant_path("b"));
  EXPECT_EQ(b.uid, 0u);
  EXPECT_EQ(b.gid, static_cast<gid_t>(kUserA));
  EXPECT_EQ(b.mode, 0664u);

  // Adopted again without a group: a new file of root's alone (the group's members may hold
  // descriptors on the old one, which they could write or truncate).
  ASSERT_TRUE(adopt_tenant_file(dir_, "b", std::nullopt, error)) << error;
  b = file_state(tenant_path("b"));
  EXPECT_EQ(b.uid, 0u);
  EXPECT_EQ(b.gid, 0u);
  EXPECT_EQ(b.mode, 0644u);
  if (users_) {
    Process& w = spawn_as(kUserA, "b", {}, {"join"});
    const auto line = w.read_line();
    ASSERT_TRUE(line.has_value());
    EXPECT_NE(line->find("belongs to another user"), std::string::npos) << *line;
  }
}

}  // namespace
}  // namespace slice::test
