// The books of what the process holds beyond plain allocations: what memory pools keep reserved
// (stream-ordered allocation), VMM allocations that live until both released and unmapped, IPC
// memory opened and exported, managed memory. Each charges exactly what the driver holds.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstdint>
#include <atomic>
#include <map>
#include <condition_variable>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "coordinator_layout.h"  // kMaxDevices

namespace slice::shim {

struct Session;

// A pool's charge follows its CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: memory a pool keeps after a free
// is memory in use. It is re-read after every allocation from the pool, a trim, a change of the
// release threshold, and before a refusal or a report (a synchronisation may have released some).
// The driver grows pools, the graph memory pool too, by whole chunks; the simulator's and current
// drivers' are 2 MiB. A pool's growth to hold `bytes` is that many bytes rounded up to chunks.
constexpr std::uint64_t kPoolChunk = 2ull << 20;
constexpr std::uint64_t pool_growth(std::uint64_t bytes) { return (bytes + kPoolChunk - 1) / kPoolChunk * kPoolChunk; }

class PoolAccounts {
 public:
  struct Pool {
    int device = 0;
    std::uint64_t charged = 0;
  };
  std::mutex mu;
  std::unordered_map<CUmemoryPool, Pool> pools;
  // Each device's graph memory pool (graph memory nodes): charged what it holds reserved.
  std::uint64_t graph_charged[kMaxDevices] = {};
  // A stream-ordered free happened since the last synchronisation: the next one may have let a
  // pool give memory back, so it settles the pools (only then: synchronisations are frequent).
  std::atomic<bool> frees_pending{false};
  // Pools destroyed while allocations from them were still out: the driver keeps the whole pool
  // until the last of those is freed, so its whole charge stays until then.
  struct Orphan {
    int device = 0;
    std::uint64_t charged = 0;
    std::size_t outstanding = 0;  // allocations from it not freed yet
  };
  std::unordered_map<CUmemoryPool, Orphan> orphans;  // guarded by mu
  std::atomic<std::size_t> orphan_count{0};
  // Pools in host memory (CU_MEM_LOCATION_TYPE_HOST, _HOST_NUMA): not VRAM, never charged.
  std::unordered_set<CUmemoryPool> host_pools;  // guarded by mu
};

// Brings the charge of every known pool on `device` (all devices: -1), its graph memory pool
// included, up to date; true if any went down.
bool settle_pools(Session& s, int device);
// A stream-ordered allocation was freed: forgets it, and gives back its part of a destroyed pool's
// charge (shim/pool_hooks.cpp).
void forget_pool_pointer(Session& s, CUdeviceptr dptr);
// The same for one device's graph memory pool alone (shim/graph_memory_hooks.cpp).
bool settle_graph_memory(Session& s, int device);

// VMM: an allocation from cuMemCreate is charged until it is released and every mapping of it is
// unmapped (the driver frees it only then), so "create, map, release" cannot escape the cap.
class VmmAccounts {
 public:
  struct Allocation {
    int device = 0;
    std::uint64_t bytes = 0;
    int references = 0;  // the handle itself, each retain, each mapping
  };
  struct Mapping {
    CUmemGenericAllocationHandle handle = 0;
    std::size_t size = 0;
  };
  std::mutex mu;
  std::unordered_map<CUmemGenericAllocationHandle, Allocation> allocations;
  std::map<CUdeviceptr, Mapping> mappings;
};

// CUDA IPC memory opened here that is charged to this tenant. Opening a handle twice gives the same
// address and needs two closes; destroying the context closes all.
class IpcAccounts {
 public:
  struct Open {
    int device = 0;
    std::uint64_t bytes = 0;  // 0: not charged (the exporter is of this tenant)
    std::uint64_t context = 0;
    int count = 0;
    bool settling = false;  // its first opener is charging it, without the lock (ipc_hooks.cpp)
  };
  std::mutex mu;
  std::condition_variable settled;  // an open's charge was decided
  std::unordered_map<CUdeviceptr, Open> opens;
  // What this process exported (cuIpcGetMemHandle), by the exported pointer: the digests written
  // in the tenant's table, withdrawn when the memory is freed (or its context destroyed).
  struct Export {
    std::uint64_t context = 0;
    std::vector<std::uint64_t> digests;
  };
  std::unordered_map<CUdeviceptr, Export> exports;  // guarded by mu
  std::atomic<std::size_t> export_count{0};         // exports.size(): a free looks only when not 0
};

// Whether this process ever exported memory through CUDA IPC (cuIpcGetMemHandle) / ever allocated
// managed memory: until it has, a free skips forget_ipc_exports' and forget_managed's look-ups with
// one load of a process-wide flag (set before the first export or managed allocation is recorded,
// never cleared).
inline std::atomic<bool> g_ipc_exports_made{false};
inline std::atomic<bool> g_managed_made{false};

// The memory at `dptr` was freed (all of a context's: `context`, dptr 0): its IPC exports are
// withdrawn from the tenant's table (withdraw_ipc_exports, shim/ipc_hooks.cpp).
void withdraw_ipc_exports(Session& s, CUdeviceptr dptr, std::uint64_t context);
inline void forget_ipc_exports(Session& s, CUdeviceptr dptr, std::uint64_t context = 0) {
  if (g_ipc_exports_made.load(std::memory_order_acquire)) withdraw_ipc_exports(s, dptr, context);
}

// Managed memory (cuMemAllocManaged) is charged to the current device when it is allocated, and
// follows the whole allocation when advice or a prefetch places it elsewhere: on the host it is
// charged nothing, on another device it is charged there (shim/managed_hooks.cpp).
class ManagedAccounts {
 public:
  std::mutex mu;
  std::unordered_map<CUdeviceptr, std::uint64_t> sizes;  // base address -> bytes
  std::atomic<std::size_t> count{0};                     // sizes.size(): a free looks only when not 0
};
void note_managed(Session& s, CUdeviceptr base, std::uint64_t bytes);
void erase_managed(Session& s, CUdeviceptr base);
inline void forget_managed(Session& s, CUdeviceptr base) {
  if (g_managed_made.load(std::memory_order_acquire)) erase_managed(s, base);
}

}  // namespace slice::shim
