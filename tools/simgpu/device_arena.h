// Address space for simulated device memory: one large MAP_NORESERVE reservation per process, carved
// by a best-fit allocator that coalesces on free. An allocation then costs no system call, so the
// simulator's own cost per cuMemAlloc/cuMemFree stays far below what libslice is measured to add.
//
// An arena is either private anonymous memory, or (reserve_shared) a memfd mapped MAP_SHARED, whose
// pages another process can map through /proc/PID/fd/FD: that is how CUDA IPC shares device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace simgpu {

class DeviceArena {
 public:
  // Reserves `bytes` of address space (nothing is committed until touched). False if it cannot.
  bool reserve(std::size_t bytes);
  // The same, backed by a memfd of `bytes + tail_bytes` bytes; the tail lies past the carved range
  // and is the owner's to use (tail()). The mapping is not inherited by fork (MADV_DONTFORK).
  bool reserve_shared(std::size_t bytes, std::size_t tail_bytes);
  // `bytes` must be a multiple of kAlign; nullptr when no free range is large enough.
  void* allocate(std::size_t bytes);
  void release(void* p, std::size_t bytes);
  bool contains(const void* p) const;

  bool shared() const { return fd_ >= 0; }
  int fd() const { return fd_; }  // the memfd of a shared arena, else -1
  std::uint64_t offset_of(const void* p) const { return reinterpret_cast<std::uintptr_t>(p) - begin_; }
  void* tail() const { return reinterpret_cast<void*>(end_); }  // reserve_shared's tail_bytes
  // A forked child has no mapping of a shared arena: it drops the descriptor and never uses the arena.
  void forget_after_fork();

  static constexpr std::size_t kAlign = 512;

 private:
  void insert_free_locked(std::uintptr_t base, std::size_t bytes);
  void erase_free_locked(std::map<std::uintptr_t, std::size_t>::iterator it);

  std::mutex mu_;
  std::uintptr_t begin_ = 0, end_ = 0;
  int fd_ = -1;
  std::map<std::uintptr_t, std::size_t> free_by_address_;
  std::set<std::pair<std::size_t, std::uintptr_t>> free_by_size_;
};

}  // namespace simgpu
