// Which tenant a process belongs to when its environment does not say (issue 26). A slice's budget
// must hold for the whole process tree, however its children are started: with a copy of the
// environment taken before anything named the tenant (Go's os/exec, Python's
// subprocess(env=dict(os.environ))), before the parent's first CUDA call, through a shell that has
// exited since. So the tenant is not passed down in a variable the program may drop: every member
// of a tenant leaves a marker in the coordinator folder, and a process without SLICE_TENANT joins
// the tenant of
//   1. its nearest ancestor (parent, grandparent, ... up to its PID namespace's init) that is a
//      live member of one;
//   2. else, the leader of its process group, then of its session, if that one is a live member
//      (a child whose parent exited is given to init, but keeps its process group and session: a
//      server started as a job, a service or a container's first process, and whatever it started
//      through a shell that is gone since);
//   3. else, a tenant of its own, with a new name.
// Unrelated programs started by one shell (or one script) share neither: the shell is no member.
//
// A marker is a symbolic link members/<proc instance>.<pid>.<start time> -> <tenant>, made by the
// process when it joins and removed when it leaves; the start time (in clock ticks since boot, from
// /proc) tells a reused PID apart, so a marker left by a crash never names a live process. A marker
// counts only if its owner is the process's own user (or root): another user cannot lead a
// process into a tenant of their choosing.
//
// What a program can still do to leave its slice: clear LD_PRELOAD, or start a process that is no
// descendant of a member and in no member's process group or session (setsid after its parent
// exited: a daemon's double fork), or name another tenant itself (SLICE_TENANT).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace slice {

// What names a process across PID reuse: the /proc that numbers it (the device of that file system:
// one per PID namespace, as mounted), its PID there, and its start time.
struct ProcessIdentity {
  std::uint64_t proc_instance = 0;
  pid_t pid = 0;
  std::uint64_t start_ticks = 0;
  uid_t uid = 0;  // effective
  pid_t parent = 0;
  pid_t group = 0;
  pid_t session = 0;
};

// As this process's /proc says, in that /proc's numbering (which is not the process's own where
// a PID namespace was made without a /proc of its own); nullopt when it is gone or cannot be read.
std::optional<ProcessIdentity> identity_of(pid_t pid);
std::optional<ProcessIdentity> own_identity();  // this process (never /proc/<getpid()>: another numbering)

// The processes whose tenant a new member inherits, in the order they are asked (above): its
// ancestors, nearest first, then its process group's and its session's leaders.
std::vector<ProcessIdentity> lineage(const ProcessIdentity& self);

// The tenant of the first live member in `self`'s lineage, if any (markers under `dir`).
std::optional<std::string> inherited_tenant(const std::string& dir, const ProcessIdentity& self);
std::optional<std::string> inherited_tenant(const std::string& dir);  // of this process

// This process's marker: made when it joins `tenant`, removed when it leaves. False (and a reason)
// when the folder cannot take it: its descendants then start tenants of their own.
bool mark_member(const std::string& dir, const std::string& tenant, std::string& error);
void unmark_member(const std::string& dir);

// Markers under `dir` whose process (numbered by this process's /proc) is gone; removed by
// `slicectl gc`. Returns how many were removed.
int remove_stale_markers(const std::string& dir);

// A tenant name no other process on any machine sharing the coordinator picks: `program` (its
// characters kept where a tenant name allows them), the PID and random bits.
std::string new_tenant_name(const std::string& program);

inline constexpr const char* kMembersFolder = "members";

}  // namespace slice
