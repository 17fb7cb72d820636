// The bell a tenant rings when it starts work on a GPU after resting. The others' compute watchers
// stop reading a resting tenant's file (ComputeBoard: with hundreds of tenants, most rest), and
// read it again at their next look once the bell rang, instead of a second later.
//
// Ringing is making and removing a file in SLICE_COORDINATOR_DIR/awake/ (mode 1777 like tenants/:
// anyone may ring, nobody may remove another's file), which changes the folder's modification
// time; a watcher looks at that time every few milliseconds, with one stat. There is no shared
// word that any tenant could write: a tenant can ring for nothing (the others then read the
// resting files once more, as they used to every 50 ms), but cannot silence another.
#pragma once

#include <cstdint>
#include <string>

namespace slice {

inline constexpr const char* kAwakeFolder = "awake";

// Rings: makes and removes awake/<tenant>.<pid>. Best effort (a watcher that never hears it reads
// resting tenants again within a second anyway): false when the folder refused it.
bool ring_awake_bell(const std::string& dir, const std::string& tenant);

// Whether a folder changed since the last look: its modification time differs from the last one
// seen, or is so recent that a second change within the same tick of the clock that stamps it (the
// kernel's coarse clock, 1-10 ms) could hide behind the first. The first look says changed.
class FolderChanges {
 public:
  enum class Seen { unchanged, changed, missing };
  explicit FolderChanges(std::string path) : path_(std::move(path)) {}
  Seen look();

 private:
  std::string path_;
  std::int64_t mtime_ns_ = -1;
};

}  // namespace slice
