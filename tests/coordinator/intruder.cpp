// coordinator_intruder: what another local user can do to the coordinator's files with nothing but
// the access the files give them (issue 29). The tests run it as a second user and check that it
// harms nobody. It never joins a tenant the way libslice does.
//
//   intruder lock-every-byte DIR TENANT   opens the tenant's files it may read and takes a read lock
//                                         on every lock byte of each that is free (the registration
//                                         and slot locks), prints "locked", and goes on taking those
//                                         that come free (a slot whose process died) until killed
//   intruder hold-open DIR TENANT         opens tenants/TENANT for writing (it may now: its own,
//                                         before root adopts it); prints "open"; at a line on
//                                         standard input truncates the file through that descriptor
//                                         and prints "truncated"; then sleeps until killed
//   intruder swap-during-rm DIR TENANT VICTIM
//                                         as the owner of DIR: takes the tenant's registration lock,
//                                         prints "held", and 300 ms later puts a link to the folder
//                                         VICTIM in place of DIR/tenants and lets the lock go (what
//                                         root's `slicectl rm`, waiting for the lock, meets next)
//   intruder forge DIR TENANT OTHER       makes a tenant file of its own that claims, on the GPU that
//                                         tenant OTHER uses, to be busy, of high priority, at a 100%
//                                         share, and to have received nothing; refreshes the claim
//                                         every 5 ms; prints "forging"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "coordinator_layout.h"
#include "tenant_file.h"

namespace {

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

[[noreturn]] void sleep_until_killed() {
  for (;;) pause();
}

// Read locks on the registration byte and every slot byte of `fd` that no live process holds
// now; how many it holds.
int read_lock_what_it_can(int fd) {
  int held = 0;
  for (std::int64_t at = slice::kInitLockByte; at < slice::kSlotLockBase + slice::kMaxProcesses; ++at) {
    struct flock fl {};
    fl.l_type = F_RDLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = at;
    fl.l_len = 1;
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) ++held;
  }
  return held;
}

int forge(const std::string& dir, const std::string& tenant, const std::string& other) {
  // The other tenant's file is readable by all: its GPU's UUID is there.
  const int other_fd = ::open((dir + "/tenants/" + other).c_str(), O_RDONLY | O_CLOEXEC);
  slice::DeviceEntry seen{};
  if (other_fd < 0 || pread(other_fd, &seen, sizeof seen, offsetof(slice::TenantFile, devices)) != sizeof seen)
    return say("error cannot read tenant " + other), 4;
  // Made by hand, as a script would: a valid header and one device entry.
  const int fd = ::open((dir + "/tenants/" + tenant).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  void* p = MAP_FAILED;
  if (fd < 0 || ftruncate(fd, sizeof(slice::TenantFile)) != 0 ||
      (p = mmap(nullptr, sizeof(slice::TenantFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
    return say(std::string("error ") + std::strerror(errno)), 4;
  auto* file = static_cast<slice::TenantFile*>(p);
  file->header.magic = slice::kTenantMagic;
  file->header.version = slice::kTenantVersion;
  file->header.file_size = sizeof(slice::TenantFile);
  std::snprintf(file->header.name, sizeof file->header.name, "%s", tenant.c_str());
  file->header.owner_uid = geteuid();
  slice::DeviceEntry& e = file->devices[0];
  std::memcpy(e.uuid, seen.uuid, sizeof e.uuid);
  e.compute_share.store(100);
  e.compute_limit.store(100);
  e.compute_priority.store(slice::stored_priority(slice::Priority::high));
  e.received_ns.store(0);
  e.state.store(2);
  say("forging");
  for (;;) {
    const std::uint64_t now = slice::monotonic_ns();
    e.active_processes.store(1);
    e.wanting_processes.store(1);
    e.active_heartbeat_ns.store(now);
    e.wanting_heartbeat_ns.store(now);
    e.joined_ms.store(slice::joined_stamp_ms(now));
    e.drain_eta_ns.store(0);
    usleep(5000);
  }
}

}  // namespace

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "lock-every-byte" && argc == 4) {
    // Both files, where it may read them; and again and again, so that the slot of a process that
    // dies is taken the moment it is free.
    const std::string dir = argv[2], tenant = argv[3];
    int fds[2];
    int n = 0;
    for (const std::string& path : {dir + "/tenants/" + tenant, dir + "/locks/" + tenant})
      if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); fd >= 0) fds[n++] = fd;
    if (n == 0) return say("error cannot open tenants/" + tenant), 4;
    for (int k = 0; k < n; ++k) read_lock_what_it_can(fds[k]);
    say("locked");
    for (;;) {
      for (int k = 0; k < n; ++k) read_lock_what_it_can(fds[k]);
      usleep(10'000);
    }
  }
  if (command == "hold-open" && argc == 4) {
    const int fd = ::open((std::string(argv[2]) + "/tenants/" + argv[3]).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return say(std::string("error ") + std::strerror(errno)), 4;
    say("open");
    std::string line;
    std::getline(std::cin, line);
    say(ftruncate(fd, 0) == 0 ? "truncated" : std::string("error ") + std::strerror(errno));
    sleep_until_killed();
  }
  if (command == "swap-during-rm" && argc == 5) {
    const std::string dir = argv[2], tenant = argv[3], victim = argv[4];
    std::string error;
    auto h = slice::TenantFileHandle::open(dir, tenant, slice::TenantFileHandle::Mode::read_write, error);
    if (!h || !h->lock_init(1'000'000'000ull)) return say("error " + error), 4;
    say("held");
    usleep(300'000);
    if (rename((dir + "/tenants").c_str(), (dir + "/tenants.moved").c_str()) != 0 ||
        symlink(victim.c_str(), (dir + "/tenants").c_str()) != 0)
      return say(std::string("error ") + std::strerror(errno)), 4;
    h->unlock_init();
    say("swapped");
    sleep_until_killed();
  }
  if (command == "forge" && argc == 5) return forge(argv[2], argv[3], argv[4]);
  std::fprintf(stderr,
               "usage: intruder lock-every-byte|hold-open DIR TENANT | swap-during-rm DIR TENANT VICTIM | "
               "forge DIR TENANT OTHER\n");
  return 2;
}
