// Device, pitched, managed and host memory; memory info; address ranges and pointer attributes.
// Device memory is host memory mapped with MAP_NORESERVE (so a 24 GiB device costs nothing until
// touched) whose address is the device pointer: copies and sets are plain memcpy/memset.
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "device_arena.h"
#include "driver.h"

namespace simgpu {

namespace {
std::uint64_t round_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

namespace {
// Memory comes from arenas sized for twice every device's memory so that fragmentation never refuses
// what the device could hold; past them, plain mappings take over. cuMemAlloc memory has an arena of
// its own, a memfd, so that another process can map it (CUDA IPC, drv_ipc.cpp); everything else
// (host, managed, pool, array memory) is private.
std::size_t arena_bytes() {
  std::uint64_t total = 0;
  const MachineHeader& h = driver().machine->header();
  for (std::uint32_t d = 0; d < h.device_count; ++d) total += h.memory_bytes[d];
  return 2 * total + (4ull << 30);
}

DeviceArena& private_arena() {
  static DeviceArena* a = [] {
    auto* arena = new DeviceArena();
    arena->reserve(arena_bytes());
    return arena;
  }();
  return *a;
}

std::atomic<DeviceArena*> g_shared_arena{nullptr};
std::mutex g_shared_arena_mu;
}  // namespace

DeviceArena* shared_arena(bool create) {
  if (DeviceArena* a = g_shared_arena.load(std::memory_order_acquire); a || !create) return a;
  std::lock_guard<std::mutex> lk(g_shared_arena_mu);
  if (DeviceArena* a = g_shared_arena.load()) return a;
  auto* a = new DeviceArena();
  if (!a->reserve_shared(arena_bytes(), kSharedArenaTailBytes)) {
    delete a;
    return nullptr;  // no memfd: device memory is private, and cuIpcGetMemHandle cannot export it
  }
  g_shared_arena.store(a, std::memory_order_release);
  return a;
}

void forget_device_memory_after_fork() {
  // The child has no mapping of the shared arena (MADV_DONTFORK); the object is left behind (its
  // lock may have been held by a thread that does not exist in the child) and a new one made on use.
  if (DeviceArena* a = g_shared_arena.exchange(nullptr)) a->forget_after_fork();
}

void* map_host_memory(std::size_t bytes) {
  const std::size_t size = round_up(bytes ? bytes : 1, DeviceArena::kAlign);
  if (void* p = private_arena().allocate(size)) return p;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void* map_device_memory(std::size_t bytes) {
  const std::size_t size = round_up(bytes ? bytes : 1, DeviceArena::kAlign);
  if (DeviceArena* a = shared_arena())
    if (void* p = a->allocate(size)) return p;
  return map_host_memory(bytes);
}

void unmap_host_memory(void* p, std::size_t bytes) {
  if (!p) return;
  const std::size_t size = round_up(bytes ? bytes : 1, DeviceArena::kAlign);
  DeviceArena* shared = g_shared_arena.load(std::memory_order_acquire);
  if (shared && shared->contains(p))
    shared->release(p, size);
  else if (private_arena().contains(p))
    private_arena().release(p, size);
  else
    munmap(p, size);
}

bool charge_device(int device, std::uint64_t bytes) {
  Machine& m = *driver().machine;
  if (m.charge(device, bytes)) return true;
  // Memory of processes that died is given back as soon as someone needs it.
  if (m.reap_dead_slots() > 0) return m.charge(device, bytes);
  return false;
}

void uncharge_device(int device, std::uint64_t bytes) { driver().machine->uncharge(device, bytes); }

Allocation* find_allocation_locked(std::uintptr_t ptr) {
  auto& all = driver().allocations;
  auto it = all.upper_bound(ptr);
  if (it == all.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  const std::size_t extent = a.size ? a.size : 1;
  return ptr >= a.base && ptr < a.base + extent ? &a : nullptr;
}

Allocation& record_allocation_locked(std::uintptr_t base, std::size_t size, std::size_t mapped, MemKind kind,
                                     Context* ctx, int device) {
  Driver& g = driver();
  Allocation& a = g.allocations[base];
  a = Allocation{};
  a.base = base;
  a.size = size;
  a.mapped = mapped;
  a.kind = kind;
  a.ctx = ctx;
  a.device = device;
  a.buffer_id = g.next_id++;
  return a;
}

// Allocates `bytes` of device memory for the current context. `charged` may exceed `bytes` (pitch).
static CUresult allocate(CUdeviceptr* dptr, std::size_t bytes, MemKind kind, std::uint64_t charged_bytes,
                         const char* function) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  if (CUresult r = unsafe_call_check(function)) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::uint64_t charged = round_up(charged_bytes, kAllocAlignment);
  if (charged < charged_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!charge_device(c->device, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  // cuMemAlloc and cuMemAllocPitch memory can be exported with cuIpcGetMemHandle; managed cannot.
  void* p = kind == MemKind::device ? map_device_memory(charged) : map_host_memory(charged);
  if (!p) {
    uncharge_device(c->device, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  record_allocation_locked(reinterpret_cast<std::uintptr_t>(p), bytes, charged, kind, c, c->device).charged = charged;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

// cuMemFree: memory of cuMemAlloc*, cuMemAllocManaged, and graph allocations (which "can be freed by
// passing the allocation to cuMemFreeAsync or cuMemFree", cuGraphAddMemAllocNode).
static CUresult free_device(CUdeviceptr dptr) {
  if (CUresult r = ensure_initialized()) return r;
  if (CUresult r = unsafe_call_check("cuMemFree")) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  Driver& g = driver();
  auto freeable = [](const Allocation& a) {
    return a.kind == MemKind::device || a.kind == MemKind::managed || a.kind == MemKind::graph;
  };
  Context* owner = nullptr;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    auto it = g.allocations.find(static_cast<std::uintptr_t>(dptr));
    if (it == g.allocations.end() || !freeable(it->second)) return CUDA_ERROR_INVALID_VALUE;
    owner = it->second.ctx;
  }
  // Work still queued may use the memory: a free waits for it, as cudaFree does.
  if (owner && is_live_quiet(owner)) context_synchronize(owner);
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.allocations.find(static_cast<std::uintptr_t>(dptr));
  if (it == g.allocations.end() || !freeable(it->second)) return CUDA_ERROR_INVALID_VALUE;
  Allocation a = it->second;
  g.allocations.erase(it);
  if (a.kind == MemKind::graph) {
    graph_allocation_freed_locked(a.base);  // its physical memory belongs to the graph memory pool
    return CUDA_SUCCESS;
  }
  if (a.kind == MemKind::device) ipc_withdraw_locked(a.base);  // a handle to it opens nothing any more
  if (a.charged) g.machine->uncharge(a.device, a.charged);
  unmap_host_memory(reinterpret_cast<void*>(a.base), a.mapped);
  return CUDA_SUCCESS;
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  return allocate(dptr, bytes, MemKind::device, bytes, "cuMemAlloc");
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned int elem) {
  if (!dptr || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (elem != 4 && elem != 8 && elem != 16) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t p = round_up(width, kPitchAlignment);
  if (p / height < 1 && height > 1) return CUDA_ERROR_INVALID_VALUE;
  if (height > SIZE_MAX / p) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = allocate(dptr, p * height, MemKind::device, p * height, "cuMemAllocPitch");
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  // Managed memory is charged to the device when it is allocated (no oversubscription modelled).
  return allocate(dptr, bytes, MemKind::managed, bytes, "cuMemAllocManaged");
}

CUresult cuMemFree_v2(CUdeviceptr dptr) { return free_device(dptr); }

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  Machine& m = *driver().machine;
  m.reap_dead_slots();
  std::uint64_t f = 0, t = 0;
  m.memory_info(c->device, f, t);
  *free_bytes = f;
  *total_bytes = t;
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (CUresult r = unsafe_call_check("cuMemHostAlloc")) return r;
  if (!pp || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~0xFu) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  void* p = map_host_memory(bytes);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  record_allocation_locked(reinterpret_cast<std::uintptr_t>(p), bytes, bytes, MemKind::host, c, c->device).host_flags =
      flags;
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return SIM_EXPORT_CALL(cuMemHostAlloc)(pp, bytes, 0); }

CUresult cuMemFreeHost(void* p) {
  if (CUresult r = ensure_initialized()) return r;
  if (CUresult r = unsafe_call_check("cuMemFreeHost")) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g.allocations.end() || it->second.kind != MemKind::host) return CUDA_ERROR_INVALID_VALUE;
  unmap_host_memory(p, it->second.mapped);
  g.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned int flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (!dptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Allocation* a = find_allocation_locked(reinterpret_cast<std::uintptr_t>(p));
  if (!a || a->kind != MemKind::host) return CUDA_ERROR_INVALID_VALUE;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  if (CUresult r = ensure_initialized()) return r;
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Allocation* a = find_allocation_locked(reinterpret_cast<std::uintptr_t>(p));
  if (!a || a->kind != MemKind::host) return CUDA_ERROR_INVALID_VALUE;
  *flags = a->host_flags;
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  if (find_allocation_locked(reinterpret_cast<std::uintptr_t>(p))) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  // mapped = 0: the application's memory, not ours to unmap.
  record_allocation_locked(reinterpret_cast<std::uintptr_t>(p), bytes, 0, MemKind::host, c, c->device).host_flags =
      flags;
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* p) {
  if (CUresult r = ensure_initialized()) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g.allocations.end() || it->second.kind != MemKind::host || it->second.mapped != 0)
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  g.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  Allocation* a = find_allocation_locked(static_cast<std::uintptr_t>(dptr));
  if (!a || a->kind == MemKind::host) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = a->base;
  if (size) *size = a->size;
  return CUDA_SUCCESS;
}

static CUresult pointer_attribute_locked(void* data, CUpointer_attribute attr, CUdeviceptr ptr, bool strict) {
  Allocation* a = find_allocation_locked(static_cast<std::uintptr_t>(ptr));
  if (!a) {
    if (strict) return CUDA_ERROR_INVALID_VALUE;
    // cuPointerGetAttributes reports an unknown pointer as memory of no type rather than failing.
    switch (attr) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned*>(data) = 0;
        break;
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(data) = nullptr;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(data) = -2;
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      case CU_POINTER_ATTRIBUTE_MAPPED:
        *static_cast<int*>(data) = 0;
        break;
      default:
        break;
    }
    return CUDA_SUCCESS;
  }
  const bool host = a->kind == MemKind::host;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(a->ctx);
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!host && a->kind != MemKind::managed) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<int*>(data) = 1;
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      *static_cast<unsigned long long*>(data) = a->buffer_id;
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<int*>(data) = a->kind == MemKind::managed;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = ordinal_of(a->device);
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: {
      // For memory mapped with cuMemMap the range is the whole cuMemAddressReserve reservation, not
      // the mapping (cuda.h; cuMemGetAddressRange gives the mapping).
      std::uintptr_t base = a->base;
      std::size_t size = a->size;
      vmm_reservation_locked(static_cast<std::uintptr_t>(ptr), &base, &size);
      if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *static_cast<CUdeviceptr*>(data) = base;
      else
        *static_cast<std::size_t*>(data) = size;
      break;
    }
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(data) = 1;
      break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *static_cast<int*>(data) = ipc_exportable_locked(*a);
      break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      *static_cast<unsigned long long*>(data) = 0;
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      *static_cast<CUmemoryPool*>(data) = reinterpret_cast<CUmemoryPool>(a->pool);
      break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      *static_cast<unsigned*>(data) = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (CUresult r = ensure_initialized()) return r;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  return pointer_attribute_locked(data, attr, ptr, true);
}

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr) {
  if (CUresult r = ensure_initialized()) return r;
  if (!attrs || !data) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  for (unsigned i = 0; i < n; ++i) {
    if (!data[i]) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = pointer_attribute_locked(data[i], attrs[i], ptr, false);
    if (r != CUDA_SUCCESS && attrs[i] != CU_POINTER_ATTRIBUTE_HOST_POINTER) return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuPointerSetAttribute(const void*, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  if (!find_allocation_locked(static_cast<std::uintptr_t>(ptr))) return CUDA_ERROR_INVALID_VALUE;
  return attr == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"
