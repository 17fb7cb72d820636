// CUDA IPC of cuMemAlloc memory between processes that use the same simulated machine.
//
// cuMemAlloc and cuMemAllocPitch memory lives in each process's shared arena, a memfd
// (drv_memory.cpp). cuIpcGetMemHandle publishes the allocation in an export table kept in the tail
// of that same memfd; the 64-byte handle names the exporter's pid, the memfd's descriptor, the
// table entry and an id. cuIpcOpenMemHandle opens /proc/PID/fd/FD, checks that the entry still
// holds that id, and maps the allocation's pages: both processes then address the same memory.
// Freeing the allocation withdraws its entry, so an old handle opens nothing; an exporter that has
// exited has no /proc entry. (The exporter's pid must be visible to the importer: both processes in
// one PID namespace, as for /proc.)
//
// Accounting follows the real driver, on which opening allocates no device memory: the memory stays
// the exporter's (its process is charged for it, as nvidia-smi lists it), and opening charges
// neither the importer nor the device.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>

#include "device_arena.h"
#include "driver.h"

namespace simgpu {

namespace {

constexpr std::uint64_t kTableMagic = 0x3154584550495053ull;  // "SPIPEXT1"
constexpr std::uint32_t kHandleMagic = 0x43504953;            // "SIPC"
constexpr std::uint32_t kHandleVersion = 1;
constexpr std::uint32_t kMaxExports = 8192;

// One exported allocation. The exporter writes the fields, then publishes the id; it clears the id
// first when the allocation goes. `check` lets an importer that reads a half-written entry see it.
// Plain data: the importer reads it with pread, the exporter publishes `id` through atomic_ref.
struct ExportEntry {
  std::uint64_t id;      // 0: free
  std::uint64_t offset;  // of the allocation in the memfd
  std::uint64_t size;    // as the application asked for it (cuMemGetAddressRange)
  std::uint64_t mapped;  // bytes behind it (the size rounded up to 512)
  std::int64_t device;
  std::uint64_t check;
};

struct ExportTable {
  std::uint64_t magic;
  std::uint64_t nonce;  // tells this process's memfd from any other, whatever pids are reused
  ExportEntry entries[kMaxExports];
};
static_assert(sizeof(ExportTable) <= kSharedArenaTailBytes, "the export table must fit the arena's tail");

// The handle's bytes: everything an importer needs to find and check the export.
struct HandleData {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t pid;
  std::int32_t fd;
  std::uint64_t nonce;
  std::uint64_t id;
  std::uint64_t table_offset;  // of the ExportTable in the memfd
  std::uint32_t index;         // of the entry
  std::uint32_t reserved[5];
};
static_assert(sizeof(HandleData) == sizeof(CUipcMemHandle), "a CUipcMemHandle is 64 bytes");

std::uint64_t entry_check(std::uint64_t id, std::uint64_t offset, std::uint64_t size, std::uint64_t mapped,
                          std::int64_t device) {
  std::uint64_t h = id * 0x9E3779B97F4A7C15ull;
  for (std::uint64_t v : {offset, size, mapped, static_cast<std::uint64_t>(device)}) h = (h ^ v) * 0x100000001B3ull;
  return h | 1;  // never 0, so a zeroed entry never checks
}

struct Import {
  std::uintptr_t map_base = 0;  // the pages mapped
  std::size_t map_bytes = 0;
  Context* ctx = nullptr;
  int refs = 0;
  std::uint64_t nonce = 0, id = 0;
};

}  // namespace

struct IpcState {
  ExportTable* table = nullptr;  // in the shared arena's tail; made on the first export
  std::uint64_t next_id = 1;
  std::uint32_t cursor = 0;                          // where the search for a free entry starts
  std::map<std::uintptr_t, std::uint32_t> exported;  // allocation base -> entry index
  std::map<std::uintptr_t, Import> imports;          // pointer given to the application -> mapping
};

namespace {

IpcState& state_locked() {
  Driver& g = driver();
  if (!g.ipc) g.ipc = new IpcState();
  return *g.ipc;
}

ExportTable* table_locked(IpcState& st) {
  if (st.table) return st.table;
  DeviceArena* arena = shared_arena();
  if (!arena) return nullptr;
  auto* t = static_cast<ExportTable*>(arena->tail());
  std::uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce))
    nonce = monotonic_ns() ^ (static_cast<std::uint64_t>(getpid()) << 32);
  t->nonce = nonce | 1;
  t->magic = kTableMagic;
  st.table = t;
  return t;
}

long page_size() { return sysconf(_SC_PAGESIZE); }

}  // namespace

bool ipc_exportable_locked(const Allocation& a) {
  // Legacy IPC covers cuMemAlloc memory only: not pools, managed, host, VMM or graph memory.
  if (a.kind != MemKind::device) return false;
  DeviceArena* arena = shared_arena(false);
  return arena && arena->contains(reinterpret_cast<const void*>(a.base));
}

void ipc_withdraw_locked(std::uintptr_t base) {
  IpcState* st = driver().ipc;
  if (!st) return;
  auto it = st->exported.find(base);
  if (it == st->exported.end()) return;
  std::atomic_ref<std::uint64_t>(st->table->entries[it->second].id).store(0, std::memory_order_release);
  st->exported.erase(it);
}

void ipc_close_context_locked(Context* c) {
  IpcState* st = driver().ipc;
  if (!st) return;
  for (auto it = st->imports.begin(); it != st->imports.end();) {
    if (it->second.ctx != c) {
      ++it;
      continue;
    }
    munmap(reinterpret_cast<void*>(it->second.map_base), it->second.map_bytes);
    driver().allocations.erase(it->first);
    it = st->imports.erase(it);
  }
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  // A pointer into an allocation exports the whole allocation: the importer gets its base.
  Allocation* a = find_allocation_locked(static_cast<std::uintptr_t>(dptr));
  if (!a || !ipc_exportable_locked(*a)) return CUDA_ERROR_INVALID_VALUE;
  IpcState& st = state_locked();
  ExportTable* table = table_locked(st);
  if (!table) return CUDA_ERROR_MAP_FAILED;
  DeviceArena* arena = shared_arena();
  std::uint32_t index = 0;
  // Asking again for the same allocation is "lightweight ... without adverse effects": same handle.
  if (auto it = st.exported.find(a->base); it != st.exported.end()) {
    index = it->second;
  } else {
    std::uint32_t n = 0;
    for (; n < kMaxExports; ++n) {
      index = (st.cursor + n) % kMaxExports;
      if (std::atomic_ref<std::uint64_t>(table->entries[index].id).load(std::memory_order_relaxed) == 0) break;
    }
    if (n == kMaxExports) return CUDA_ERROR_OUT_OF_MEMORY;
    st.cursor = index + 1;
    ExportEntry& e = table->entries[index];
    const std::uint64_t id = st.next_id++;  // never reused: a new allocation gets a new handle
    e.offset = arena->offset_of(reinterpret_cast<void*>(a->base));
    e.size = a->size;
    e.mapped = a->mapped;
    e.device = a->device;
    e.check = entry_check(id, e.offset, e.size, e.mapped, e.device);
    std::atomic_ref<std::uint64_t>(e.id).store(id, std::memory_order_release);
    st.exported[a->base] = index;
  }
  HandleData h{};
  h.magic = kHandleMagic;
  h.version = kHandleVersion;
  h.pid = static_cast<std::int32_t>(getpid());
  h.fd = arena->fd();
  h.nonce = table->nonce;
  h.id = table->entries[index].id;
  h.table_offset = arena->offset_of(table);
  h.index = index;
  std::memcpy(handle, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  if (!pdptr || (flags & ~static_cast<unsigned>(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  HandleData h{};
  std::memcpy(&h, &handle, sizeof h);
  if (h.magic != kHandleMagic || h.version != kHandleVersion || h.id == 0 || h.index >= kMaxExports || h.pid <= 0 ||
      h.fd < 0)
    return CUDA_ERROR_INVALID_VALUE;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  IpcState& st = state_locked();
  // A process cannot open its own handles: the real driver answers "invalid device context".
  if (h.pid == static_cast<std::int32_t>(getpid()) && st.table && st.table->nonce == h.nonce)
    return CUDA_ERROR_INVALID_CONTEXT;
  // Opened already: one more reference, the same pointer (cuIpcOpenMemHandle).
  for (auto& [ptr, imp] : st.imports) {
    if (imp.nonce == h.nonce && imp.id == h.id) {
      imp.refs++;
      *pdptr = static_cast<CUdeviceptr>(ptr);
      return CUDA_SUCCESS;
    }
  }
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;  // the exporter has exited: the handle names nothing
  // Check that the descriptor is the exporter's memfd and the entry still holds this export.
  std::uint64_t header[2] = {};
  ExportEntry e{};
  const off_t entry_at =
      static_cast<off_t>(h.table_offset + offsetof(ExportTable, entries) + h.index * sizeof(ExportEntry));
  const bool valid = pread(fd, header, sizeof header, static_cast<off_t>(h.table_offset)) == sizeof header &&
                     header[0] == kTableMagic && header[1] == h.nonce &&
                     pread(fd, &e, sizeof e, entry_at) == static_cast<ssize_t>(sizeof e) && e.id == h.id &&
                     e.check == entry_check(h.id, e.offset, e.size, e.mapped, e.device) && e.size > 0 &&
                     e.mapped >= e.size && e.offset + e.mapped <= h.table_offset;
  if (!valid) {
    close(fd);
    return CUDA_ERROR_INVALID_VALUE;  // freed since (or never exported): nothing to open
  }
  const std::uint64_t page = static_cast<std::uint64_t>(page_size());
  const std::uint64_t first = e.offset / page * page;
  const std::size_t bytes = static_cast<std::size_t>((e.offset + e.mapped + page - 1) / page * page - first);
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(first));
  close(fd);
  if (map == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  const std::uintptr_t ptr = reinterpret_cast<std::uintptr_t>(map) + (e.offset - first);
  // No device memory is charged: the allocation is the exporter's (see the top of this file).
  record_allocation_locked(ptr, e.size, e.mapped, MemKind::ipc, c, static_cast<int>(e.device));
  Import& imp = st.imports[ptr];
  imp.map_base = reinterpret_cast<std::uintptr_t>(map);
  imp.map_bytes = bytes;
  imp.ctx = c;
  imp.refs = 1;
  imp.nonce = h.nonce;
  imp.id = h.id;
  *pdptr = static_cast<CUdeviceptr>(ptr);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return SIM_EXPORT_CALL(cuIpcOpenMemHandle_v2)(pdptr, handle, flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  Driver& g = driver();
  const auto ptr = static_cast<std::uintptr_t>(dptr);
  Context* owner = nullptr;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    if (!g.ipc || !g.ipc->imports.count(ptr)) return CUDA_ERROR_INVALID_VALUE;
    Import& imp = g.ipc->imports[ptr];
    owner = imp.ctx;
    if (imp.refs > 1) {
      imp.refs--;
      return CUDA_SUCCESS;
    }
  }
  // Work still queued may use the mapping: unmap after it, as a free waits for it.
  if (owner && is_live_quiet(owner)) context_synchronize(owner);
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.ipc->imports.find(ptr);
  if (it == g.ipc->imports.end()) return CUDA_ERROR_INVALID_VALUE;  // closed by another thread meanwhile
  if (--it->second.refs > 0) return CUDA_SUCCESS;
  munmap(reinterpret_cast<void*>(it->second.map_base), it->second.map_bytes);
  g.allocations.erase(ptr);
  g.ipc->imports.erase(it);
  return CUDA_SUCCESS;
}

}  // extern "C"
