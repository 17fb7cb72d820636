// Virtual memory management: physical allocations (cuMemCreate) are memfd-backed, address ranges
// are PROT_NONE reservations, and cuMemMap maps the memfd into the range, so two mappings of one
// allocation really alias. Physical memory is charged at cuMemCreate and given back when it is both
// released and unmapped everywhere, as the driver does. An allocation made with the POSIX
// file-descriptor handle type can be exported (cuMemExportToShareableHandle: a descriptor of its
// memfd) and imported by another process (cuMemImportFromShareableHandle), which maps the same
// memory; the exporter holds the device charge, an import takes none (NCCL shares buffers so).
// Host allocations (a location of type HOST or HOST_NUMA, NCCL's host buffers) are host memory: no
// device charge, not IPC capable; HOST_NUMA names node 0, the one NUMA node of the simulated host.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "driver.h"

namespace simgpu {

struct PhysicalAllocation {
  int device = 0;  // physical; -1 for a host allocation
  std::size_t size = 0;
  int fd = -1;
  int refs = 1;            // the handle references below, plus one per mapping
  int handle_refs = 1;     // cuMemCreate, plus one per cuMemRetainAllocationHandle: each needs a cuMemRelease
  bool shareable = false;  // made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: may be exported
  bool imported = false;   // another process's allocation: its device memory is charged there
};

namespace {

struct Mapping {
  std::size_t size = 0;
  PhysicalAllocation* phys = nullptr;
};

struct Reservation {
  std::size_t size = 0;
};

std::map<std::uintptr_t, Reservation> g_reservations;  // guarded by driver().mu
std::map<std::uintptr_t, Mapping> g_mappings;

void drop_ref_locked(PhysicalAllocation* p) {
  if (--p->refs > 0) return;
  if (!p->imported && p->device >= 0) uncharge_device(p->device, p->size);
  close(p->fd);
  remove_live_locked(p);
  delete p;
}

bool inside_reservation_locked(std::uintptr_t ptr, std::size_t size) {
  auto it = g_reservations.upper_bound(ptr);
  if (it == g_reservations.begin()) return false;
  --it;
  return ptr >= it->first && ptr + size <= it->first + it->second.size;
}

}  // namespace

bool vmm_reservation_locked(std::uintptr_t ptr, std::uintptr_t* base, std::size_t* size) {
  auto it = g_reservations.upper_bound(ptr);
  if (it == g_reservations.begin()) return false;
  --it;
  if (ptr < it->first || ptr >= it->first + it->second.size) return false;
  *base = it->first;
  *size = it->second.size;
  return true;
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (!g || !prop) return CUDA_ERROR_INVALID_VALUE;
  const bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
                    (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && prop->location.id == 0);
  if (!host && (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(prop->location.id)))
    return CUDA_ERROR_INVALID_DEVICE;
  *g = kMemoryGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (CUresult r = unsafe_call_check("cuMemCreate")) return r;
  if (!handle || !prop || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || size % kMemoryGranularity) return CUDA_ERROR_INVALID_VALUE;
  const CUmemLocationType where = prop->location.type;
  if (where == CU_MEM_LOCATION_TYPE_HOST || where == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
    // Host memory: the id is ignored for HOST, a NUMA node for HOST_NUMA (the one node, 0); not IPC
    // capable, so no handle type may be asked for (cuda.h, cuMemCreate).
    if (where == CU_MEM_LOCATION_TYPE_HOST_NUMA && prop->location.id != 0) return CUDA_ERROR_INVALID_VALUE;
    if (prop->requestedHandleTypes != 0) return CUDA_ERROR_INVALID_VALUE;
    const int fd = memfd_create("simgpu-vmm-host", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
      if (fd >= 0) close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    std::lock_guard<std::mutex> lk(driver().mu);
    auto* p = new PhysicalAllocation{-1, size, fd, 1, 1};
    add_live_locked(p);
    *handle = reinterpret_cast<CUmemGenericAllocationHandle>(p);
    return CUDA_SUCCESS;
  }
  if (where != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;  // HOST_NUMA_CURRENT included
  if (!valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (prop->requestedHandleTypes & ~static_cast<unsigned>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return CUDA_ERROR_NOT_SUPPORTED;  // the other handle types are not simulated
  const int dev = physical_device(prop->location.id);
  if (!charge_device(dev, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  // The memfd's name carries the device, for a process that imports it.
  const std::string name = "simgpu-vmm-device-" + std::to_string(dev);
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    uncharge_device(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* p = new PhysicalAllocation{dev, size, fd, 1, 1};
  p->shareable = prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  add_live_locked(p);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult r = ensure_initialized()) return r;
  if (CUresult r = unsafe_call_check("cuMemRelease")) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* p = reinterpret_cast<PhysicalAllocation*>(handle);
  if (!is_live_locked(p)) return CUDA_ERROR_INVALID_VALUE;
  // The handle stops being valid when its last reference is released (a retained handle is the
  // same handle and needs its own release); the memory goes when the last mapping does.
  if (--p->handle_refs == 0) remove_live_locked(p);
  drop_ref_locked(p);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (!ptr || size == 0 || size % kMemoryGranularity || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment && (alignment & (alignment - 1))) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t align = std::max<std::size_t>(alignment, kMemoryGranularity);
  // Over-reserve so the range can be aligned, then give back the slack on both sides.
  const std::size_t span = size + align;
  void* hint = reinterpret_cast<void*>(addr);
  void* raw = mmap(hint, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::uintptr_t start = (reinterpret_cast<std::uintptr_t>(raw) + align - 1) / align * align;
  const std::uintptr_t end = start + size;
  if (start > reinterpret_cast<std::uintptr_t>(raw)) munmap(raw, start - reinterpret_cast<std::uintptr_t>(raw));
  const std::uintptr_t raw_end = reinterpret_cast<std::uintptr_t>(raw) + span;
  if (raw_end > end) munmap(reinterpret_cast<void*>(end), raw_end - end);
  std::lock_guard<std::mutex> lk(driver().mu);
  g_reservations[start] = Reservation{size};
  *ptr = static_cast<CUdeviceptr>(start);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto it = g_reservations.find(static_cast<std::uintptr_t>(ptr));
  if (it == g_reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [base, m] : g_mappings)
    if (base >= ptr && base < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // unmap first
  munmap(reinterpret_cast<void*>(ptr), size);
  g_reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (CUresult r = unsafe_call_check("cuMemMap")) return r;
  if (flags != 0 || size == 0 || size % kMemoryGranularity || offset % kMemoryGranularity)
    return CUDA_ERROR_INVALID_VALUE;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto* p = reinterpret_cast<PhysicalAllocation*>(handle);
  if (!is_live_locked(p)) return CUDA_ERROR_INVALID_HANDLE;
  if (offset + size > p->size) return CUDA_ERROR_INVALID_VALUE;
  const auto base = static_cast<std::uintptr_t>(ptr);
  if (!inside_reservation_locked(base, size)) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [b, m] : g_mappings)
    if (base < b + m.size && b < base + size) return CUDA_ERROR_ALREADY_MAPPED;
  // Not accessible until cuMemSetAccess, as on the device.
  void* r =
      mmap(reinterpret_cast<void*>(base), size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd, static_cast<off_t>(offset));
  if (r == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  g_mappings[base] = Mapping{size, p};
  p->refs++;
  // So that copies, sets and pointer queries see the range.
  if (p->device >= 0)
    record_allocation_locked(base, size, size, MemKind::device, g.primary[p->device], p->device);
  else
    record_allocation_locked(base, size, size, MemKind::host, nullptr, 0);
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = ensure_initialized()) return r;
  if (CUresult r = unsafe_call_check("cuMemUnmap")) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g_mappings.find(static_cast<std::uintptr_t>(ptr));
  if (it == g_mappings.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  PhysicalAllocation* p = it->second.phys;
  g_mappings.erase(it);
  g.allocations.erase(static_cast<std::uintptr_t>(ptr));
  drop_ref_locked(p);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (CUresult r = ensure_initialized()) return r;
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  const auto base = static_cast<std::uintptr_t>(ptr);
  std::size_t covered = 0;
  for (auto& [b, m] : g_mappings)
    if (b >= base && b + m.size <= base + size) covered += m.size;
  if (covered != size) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (std::size_t i = 0; i < count; ++i) {
    const bool host_numa = desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && desc[i].location.id == 0;
    if (!host_numa && (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(desc[i].location.id)))
      return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
      prot = PROT_READ;
  }
  mprotect(reinterpret_cast<void*>(ptr), size, prot);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  if (CUresult r = ensure_initialized()) return r;
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* p = reinterpret_cast<PhysicalAllocation*>(handle);
  if (!is_live_locked(p)) return CUDA_ERROR_INVALID_VALUE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = p->device >= 0 ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
  prop->location.id = p->device >= 0 ? ordinal_of(p->device) : 0;
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (!shareable || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* p = reinterpret_cast<PhysicalAllocation*>(handle);
  if (!is_live_locked(p)) return CUDA_ERROR_INVALID_VALUE;
  if (!p->shareable) return CUDA_ERROR_INVALID_VALUE;  // not made with this handle type
  const int fd = dup(p->fd);  // the caller's to close; without close-on-exec, for a child to inherit
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type) {
  if (CUresult r = ensure_initialized()) return r;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = static_cast<int>(reinterpret_cast<std::intptr_t>(os_handle));
  struct stat st {};
  char link[256] = {}, path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, link, sizeof link - 1);
  const char* marker = n > 0 ? std::strstr(link, "simgpu-vmm-device-") : nullptr;
  if (fstat(fd, &st) != 0 || marker == nullptr) return CUDA_ERROR_INVALID_VALUE;  // not one of ours
  const int dev = std::atoi(marker + std::strlen("simgpu-vmm-device-"));          // physical
  if (ordinal_of(dev) < 0) return CUDA_ERROR_INVALID_DEVICE;                      // a device this process does not see
  const int own = dup(fd);  // the caller keeps (and closes) its descriptor
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* p = new PhysicalAllocation{dev, static_cast<std::size_t>(st.st_size), own, 1, 1};
  p->shareable = true;
  p->imported = true;
  add_live_locked(p);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (CUresult r = ensure_initialized()) return r;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto it = g_mappings.upper_bound(reinterpret_cast<std::uintptr_t>(addr));
  if (it == g_mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (reinterpret_cast<std::uintptr_t>(addr) >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  PhysicalAllocation* p = it->second.phys;
  // The same handle value as the one mapped, with one more reference to release.
  p->refs++;
  if (p->handle_refs++ == 0) add_live_locked(p);
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(p);
  return CUDA_SUCCESS;
}

}  // extern "C"
