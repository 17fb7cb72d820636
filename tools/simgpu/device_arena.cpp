#include "device_arena.h"

#include <sys/mman.h>
#include <unistd.h>

namespace simgpu {

namespace {
// Freed ranges at least this large give their pages back to the system; smaller ones keep them for
// reuse, which bounds what is resident to the largest amount ever touched.
constexpr std::size_t kReturnPagesBytes = 64ull << 20;
}  // namespace

bool DeviceArena::reserve(std::size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (begin_) return true;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  begin_ = reinterpret_cast<std::uintptr_t>(p);
  end_ = begin_ + bytes;
  insert_free_locked(begin_, bytes);
  return true;
}

bool DeviceArena::reserve_shared(std::size_t bytes, std::size_t tail_bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (begin_) return true;
  const int fd = memfd_create("simgpu-device-memory", MFD_CLOEXEC);
  if (fd < 0) return false;
  // A sparse file: tmpfs gives it pages only where they are written.
  if (ftruncate(fd, static_cast<off_t>(bytes + tail_bytes)) != 0) {
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, bytes + tail_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return false;
  }
  // A forked child must not write into its parent's device memory through an inherited mapping.
  madvise(p, bytes + tail_bytes, MADV_DONTFORK);
  fd_ = fd;
  begin_ = reinterpret_cast<std::uintptr_t>(p);
  end_ = begin_ + bytes;
  insert_free_locked(begin_, bytes);
  return true;
}

void DeviceArena::forget_after_fork() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

bool DeviceArena::contains(const void* p) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return a >= begin_ && a < end_;
}

void DeviceArena::insert_free_locked(std::uintptr_t base, std::size_t bytes) {
  free_by_address_[base] = bytes;
  free_by_size_.insert({bytes, base});
}

void DeviceArena::erase_free_locked(std::map<std::uintptr_t, std::size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_address_.erase(it);
}

void* DeviceArena::allocate(std::size_t bytes) {
  if (bytes == 0 || bytes % kAlign) return nullptr;
  std::lock_guard<std::mutex> lk(mu_);
  auto best = free_by_size_.lower_bound({bytes, 0});
  if (best == free_by_size_.end()) return nullptr;
  const std::uintptr_t base = best->second;
  const std::size_t size = best->first;
  erase_free_locked(free_by_address_.find(base));
  if (size > bytes) insert_free_locked(base + bytes, size - bytes);
  return reinterpret_cast<void*>(base);
}

void DeviceArena::release(void* p, std::size_t bytes) {
  if (!p || bytes == 0) return;
  std::uintptr_t base = reinterpret_cast<std::uintptr_t>(p);
  // Reads back as zeros, as fresh memory. A shared mapping keeps its pages in the file unless they are
  // removed from it. Only whole pages inside the range: the pages at its ends may hold neighbours.
  if (bytes >= kReturnPagesBytes) {
    const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const std::uintptr_t first = (base + page - 1) / page * page, last = (base + bytes) / page * page;
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, fd_ >= 0 ? MADV_REMOVE : MADV_DONTNEED);
  }
  std::lock_guard<std::mutex> lk(mu_);
  // Coalesce with the free neighbours on both sides.
  auto next = free_by_address_.lower_bound(base);
  if (next != free_by_address_.end() && next->first == base + bytes) {
    bytes += next->second;
    erase_free_locked(next);
  }
  auto prev = free_by_address_.lower_bound(base);
  if (prev != free_by_address_.begin()) {
    --prev;
    if (prev->first + prev->second == base) {
      base = prev->first;
      bytes += prev->second;
      erase_free_locked(prev);
    }
  }
  insert_free_locked(base, bytes);
}

}  // namespace simgpu
