// Address space for simulated device memory: one large MAP_NORESERVE reservation per process, carved
// by a best-fit allocator that coalesces on free. An allocation then costs no system call, so the
// simulator's own cost per cuMemAlloc/cuMemFree stays far below what libslice is measured to add.
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
  // `bytes` must be a multiple of kAlign; nullptr when no free range is large enough.
  void* allocate(std::size_t bytes);
  void release(void* p, std::size_t bytes);
  bool contains(const void* p) const;

  static constexpr std::size_t kAlign = 512;

 private:
  void insert_free_locked(std::uintptr_t base, std::size_t bytes);
  void erase_free_locked(std::map<std::uintptr_t, std::size_t>::iterator it);

  std::mutex mu_;
  std::uintptr_t begin_ = 0, end_ = 0;
  std::map<std::uintptr_t, std::size_t> free_by_address_;
  std::set<std::pair<std::size_t, std::uintptr_t>> free_by_size_;
};

}  // namespace simgpu
