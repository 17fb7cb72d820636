// The bell a tenant rings when it starts work on a GPU after resting. The others' compute watchers
// stop reading a resting tenant's file (ComputeBoard: with hundreds of tenants, most rest), and
// read it again at their next look once the bell rang, instead of a second later.
//
// Ringing is setting the times of SLICE_COORDINATOR_DIR/awake/ (mode 1777 like tenants/) to now
// with futimens, which anyone who may write in it may do; a watcher looks at its modification
// time every 10 ms, with one stat. There is no shared word and no file name that a tenant could
// take from another: a tenant can ring for nothing (the others then read the resting files once
// more), but cannot silence another. A folder that is not shared and sticky, or that belongs to
// neither root nor the coordinator folder's owner, is not trusted: resting tenants are then read
// every 50 ms, as without a bell.
#pragma once

#include <cstdint>
#include <string>

namespace slice {

inline constexpr const char* kAwakeFolder = "awake";

// Rings. Best effort (a watcher that never hears it reads resting tenants again within a second
// anyway): false when the folder is missing or refused it.
bool ring_awake_bell(const std::string& dir);

// Whether the bell's folder of `dir` can be trusted to ring (see above).
bool bell_trusted(const std::string& dir);

// Whether a folder changed since the last look: its modification time differs from the last one
// seen, or the last look came within a tick of that time, so that a second change within the same
// tick of the clock that stamps it (the kernel's coarse clock, 1-10 ms) could hide behind the
// first. The first look says changed.
class FolderChanges {
 public:
  enum class Seen { unchanged, changed, missing };
  explicit FolderChanges(std::string path) : path_(std::move(path)) {}
  Seen look();

 private:
  std::string path_;
  std::int64_t mtime_ns_ = -1;
  std::int64_t looked_ns_ = -1;  // the real time of the last look
};

}  // namespace slice
