// Memory the driver holds on the process's behalf beyond single allocations: what memory pools
// keep reserved (stream-ordered allocation), and VMM allocations that live until both released and
// unmapped. Each charges the coordinator exactly what the driver holds.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstdint>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>

namespace slice::shim {

struct Session;

// A pool's charge follows its CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: memory a pool keeps after a free
// is memory in use. It is re-read after every allocation from the pool, a trim, a change of the
// release threshold, and before a refusal or a report (a synchronisation may have released some).
class PoolAccounts {
 public:
  struct Pool {
    int device = 0;
    std::uint64_t charged = 0;
  };
  std::mutex mu;
  std::unordered_map<CUmemoryPool, Pool> pools;
  // Each device's graph memory pool (graph memory nodes): charged what it holds reserved.
  std::uint64_t graph_charged[16] = {};
  // A stream-ordered free happened since the last synchronisation: the next one may have let a
  // pool give memory back, so it settles the pools (only then: synchronisations are frequent).
  std::atomic<bool> frees_pending{false};
  // Pools destroyed while allocations from them were still out: the driver frees their memory with
  // the last of those frees, so what is still charged for them goes back with each one.
  std::unordered_map<CUmemoryPool, Pool> orphans;  // guarded by mu
  std::atomic<std::size_t> orphan_count{0};
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
  };
  std::mutex mu;
  std::unordered_map<CUdeviceptr, Open> opens;
};

}  // namespace slice::shim
