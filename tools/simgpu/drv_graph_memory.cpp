// Graph memory nodes (cuGraphAddMemAllocNode, cuGraphAddMemFreeNode) and each device's graph memory
// pool (cuDeviceGraphMemTrim, cuDeviceGet/SetGraphMemAttribute).
//
// What the CUDA documentation says, and how it is modelled here:
// - "CUDA assigns virtual addresses for the graph allocation at node creation time", and "the
//   allocation's address remains fixed across instantiations and launches" (cuGraphAddMemAllocNode):
//   each allocation node gets an address range when it is added. It costs no device memory.
// - "Physical memory cannot be allocated or mapped during graph instantiation because the stream in
//   which the graph will execute is unknown. Mapping is done instead during graph launch", or at
//   cuGraphUpload (programming guide, Graph Memory Nodes): physical memory is taken from the
//   device's graph memory pool at the first launch or upload of an executable graph. The pool grows
//   by whole 2 MiB chunks charged to the device, so it shows in cuMemGetInfo, NVML and simgpu-stat,
//   and a launch that needs more than the device has left fails with CUDA_ERROR_OUT_OF_MEMORY.
//   Each allocation node takes its size rounded up to 512 bytes (no sharing of physical memory
//   between allocations of one graph or between graphs, which the real driver may do: the figures
//   here are an upper bound of its).
// - "Physical mappings for a graph are retained between launches": an executable graph keeps its
//   memory until it is destroyed, and an allocation still live keeps its own until it is freed.
// - Destroying a graph "will not immediately return physical memory to the OS ... an application
//   should use cudaDeviceGraphMemTrim", which "will unmap and release any physical memory reserved
//   by graph memory nodes that is not actively in use. Allocations that have not been freed and
//   graphs that are scheduled or running are considered to be actively using the physical memory":
//   memory unmapped from graphs stays reserved in the pool until cuDeviceGraphMemTrim.
// - USED_MEM_CURRENT is "the amount of physical memory currently mapped by at least one graph",
//   RESERVED_MEM_CURRENT "the amount of physical memory reserved by the driver for graph
//   allocations in the current process"; the high watermarks "can only be reset to zero", which
//   restarts them from the current amount.
// Allocation lifetimes are kept in API order: a launch makes the allocations it leaves unfreed live
// at once (so cuMemFreeAsync and copies ordered after the launch find them), and a free node, a
// cuMemFree or a cuMemFreeAsync ends them.
#include <algorithm>

#include "graph.h"

namespace simgpu {

struct GraphMemBlock {
  std::uintptr_t base = 0;
  std::size_t size = 0;       // bytesize as asked
  std::size_t footprint = 0;  // the physical memory it takes: the size rounded up to 512
  int device = 0;
  Graph* owner = nullptr;        // the graph of its allocation node, while that graph lives
  GraphExec* exec = nullptr;     // the executable graph made from that graph, while it lives
  bool freed_in_owner = false;   // the owning graph has a free node for it
  bool freed_elsewhere = false;  // another graph has one
  bool live = false;             // allocated by a launch and not freed since: an Allocation record exists
  bool mapped = false;           // physical memory is behind it, counted in its device pool's `used`
};

namespace {

struct GraphMemPool {
  std::uint64_t reserved = 0;  // charged on the device
  std::uint64_t used = 0;      // mapped to graph allocations
  std::uint64_t reserved_high = 0;
  std::uint64_t used_high = 0;
};

std::uint64_t chunk_round(std::uint64_t v) {
  return (v + kMemoryGranularity - 1) / kMemoryGranularity * kMemoryGranularity;
}

}  // namespace

struct GraphMemoryState {
  GraphMemPool pools[kMaxDevices];
  std::map<std::uintptr_t, std::shared_ptr<GraphMemBlock>> blocks;  // every block whose address is held
};

namespace {

GraphMemoryState& state_locked() {
  Driver& g = driver();
  if (!g.graph_memory) g.graph_memory = new GraphMemoryState();
  return *g.graph_memory;
}

GraphMemBlock* find_block_locked(std::uintptr_t base) {
  GraphMemoryState& st = state_locked();
  auto it = st.blocks.find(base);
  return it == st.blocks.end() ? nullptr : it->second.get();
}

void unmap_block_locked(GraphMemBlock* b) {
  if (!b->mapped) return;
  b->mapped = false;
  GraphMemPool& pool = state_locked().pools[b->device];
  pool.used -= std::min<std::uint64_t>(b->footprint, pool.used);
}

// The address range goes when nothing can name it any more: no node, no executable graph, not live.
void maybe_release_block_locked(GraphMemBlock* b) {
  if (b->owner || b->exec || b->live) return;
  unmap_block_locked(b);
  unmap_host_memory(reinterpret_cast<void*>(b->base), b->footprint);
  state_locked().blocks.erase(b->base);  // may delete b
}

// An allocation's lifetime ends (free node, cuMemFree, cuMemFreeAsync, or auto-free on relaunch).
// The executable graph keeps the physical memory for its next launch; without one, it goes back.
void end_allocation_locked(GraphMemBlock* b) {
  b->live = false;
  if (!b->exec) unmap_block_locked(b);
  maybe_release_block_locked(b);
}

template <class F>
void for_each_alloc_block(GraphExec* exec, F&& f) {
  for (GraphNode& n : exec->nodes)
    if (n.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n.block) f(n.block.get());
}

}  // namespace

CUresult graph_make_alloc_block_locked(Graph* owner, CUDA_MEM_ALLOC_NODE_PARAMS& p, int device_count,
                                       std::shared_ptr<GraphMemBlock>* out) {
  const CUmemPoolProps& props = p.poolProps;
  if (p.bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      props.location.id < 0 || props.location.id >= device_count)
    return CUDA_ERROR_INVALID_VALUE;
  // "handleTypes must be CU_MEM_HANDLE_TYPE_NONE. IPC is not supported." (CUDA_MEM_ALLOC_NODE_PARAMS)
  if (props.handleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_INVALID_VALUE;
  // "accessDescCount: Must not exceed the number of GPUs."
  if (p.accessDescCount > static_cast<std::size_t>(device_count) || (p.accessDescCount && !p.accessDescs))
    return CUDA_ERROR_INVALID_VALUE;
  for (std::size_t i = 0; i < p.accessDescCount; ++i)
    if (p.accessDescs[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || p.accessDescs[i].location.id < 0 ||
        p.accessDescs[i].location.id >= device_count)
      return CUDA_ERROR_INVALID_VALUE;
  const std::uint64_t footprint = (p.bytesize + kAllocAlignment - 1) / kAllocAlignment * kAllocAlignment;
  if (footprint < p.bytesize) return CUDA_ERROR_OUT_OF_MEMORY;
  void* va = map_host_memory(footprint);  // address space only: no device memory until a launch
  if (!va) return CUDA_ERROR_OUT_OF_MEMORY;
  auto b = std::make_shared<GraphMemBlock>();
  b->base = reinterpret_cast<std::uintptr_t>(va);
  b->size = p.bytesize;
  b->footprint = footprint;
  b->device = physical_device(props.location.id);
  b->owner = owner;
  state_locked().blocks[b->base] = b;
  p.dptr = static_cast<CUdeviceptr>(b->base);
  *out = std::move(b);
  return CUDA_SUCCESS;
}

CUresult graph_check_free_node_locked(Graph* g, CUdeviceptr dptr) {
  // "an address that was not returned by an allocation node" and "an invalid address".
  GraphMemBlock* b = find_block_locked(static_cast<std::uintptr_t>(dptr));
  if (!b) return CUDA_ERROR_INVALID_VALUE;
  // "an allocation twice in the same graph".
  for (auto& n : g->nodes)
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE && n->free_ptr == dptr) return CUDA_ERROR_INVALID_VALUE;
  // "If the allocation is freed in the same graph, a free node cannot be added to another graph. If
  // the allocation is freed in another graph, a free node can no longer be added to the owning graph."
  if (b->owner == g ? b->freed_elsewhere : b->freed_in_owner) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

void graph_add_free_node_locked(GraphNode* node, CUdeviceptr dptr) {
  GraphMemBlock* b = find_block_locked(static_cast<std::uintptr_t>(dptr));
  node->free_ptr = dptr;
  node->graph->has_memory_nodes = true;
  if (b->owner == node->graph)
    b->freed_in_owner = true;
  else
    b->freed_elsewhere = true;
}

void graph_attach_alloc_node_locked(GraphNode* node, const CUDA_MEM_ALLOC_NODE_PARAMS& p,
                                    std::shared_ptr<GraphMemBlock> block) {
  node->block = std::move(block);
  node->alloc = p;
  node->access.assign(p.accessDescs, p.accessDescs + p.accessDescCount);
  node->alloc.accessDescs = nullptr;  // the caller's array is not kept; GetParams hands out the copy
  node->graph->has_memory_nodes = true;
}

CUresult graph_memory_instantiate_locked(Graph* g, GraphExec* exec) {
  if (!g->has_memory_nodes) return CUDA_SUCCESS;
  // "If hGraph contains any allocation or free nodes, there can be at most one executable graph in
  // existence for that graph at a time." (cuGraphInstantiate) So the two can point at each other.
  if (g->instance) return CUDA_ERROR_INVALID_VALUE;
  g->instance = exec;
  exec->graph = g;
  for_each_alloc_block(exec, [&](GraphMemBlock* b) { b->exec = exec; });
  return CUDA_SUCCESS;
}

CUresult graph_memory_upload_locked(GraphExec* exec) {
  GraphMemoryState& st = state_locked();
  std::uint64_t need[kMaxDevices] = {};
  bool any = false;
  for_each_alloc_block(exec, [&](GraphMemBlock* b) {
    if (!b->mapped) need[b->device] += b->footprint, any = true;
  });
  if (!any) return CUDA_SUCCESS;
  // Grow each device's pool by what its idle reserve lacks; all or nothing.
  std::uint64_t grown[kMaxDevices] = {};
  for (int d = 0; d < kMaxDevices; ++d) {
    GraphMemPool& pool = st.pools[d];
    const std::uint64_t idle = pool.reserved - pool.used;
    if (need[d] <= idle) continue;
    const std::uint64_t grow = chunk_round(need[d] - idle);
    if (grow < need[d] - idle || !charge_device(d, grow)) {
      for (int e = 0; e < d; ++e) {
        if (!grown[e]) continue;
        st.pools[e].reserved -= grown[e];
        uncharge_device(e, grown[e]);
      }
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    grown[d] = grow;
    pool.reserved += grow;
    pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
  }
  for_each_alloc_block(exec, [&](GraphMemBlock* b) {
    if (b->mapped) return;
    b->mapped = true;
    GraphMemPool& pool = st.pools[b->device];
    pool.used += b->footprint;
    pool.used_high = std::max(pool.used_high, pool.used);
  });
  return CUDA_SUCCESS;
}

CUresult graph_memory_launch_locked(GraphExec* exec, Context* ctx) {
  // "If any allocations created by hGraphExec remain unfreed (from a previous launch) and hGraphExec
  // was not instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, the launch will fail
  // with CUDA_ERROR_INVALID_VALUE." (cuGraphLaunch)
  const bool auto_free = exec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
  bool unfreed = false;
  for_each_alloc_block(exec, [&](GraphMemBlock* b) { unfreed |= b->live; });
  if (unfreed && !auto_free) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = graph_memory_upload_locked(exec)) return r;
  Driver& g = driver();
  // Auto-free: "each launch behave[s] as though it called cuMemFreeAsync for every unfreed allocation".
  for (GraphNode& n : exec->nodes) {
    if (n.type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || !n.block || !n.block->live) continue;
    g.allocations.erase(n.block->base);
    end_allocation_locked(n.block.get());
  }
  for (GraphNode& n : exec->nodes) {
    if (n.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n.block) {
      GraphMemBlock* b = n.block.get();
      if (b->freed_in_owner) continue;  // lives and dies inside the graph
      b->live = true;
      // Stream work ordered after the launch may use it until it is freed.
      record_allocation_locked(b->base, b->size, b->footprint, MemKind::graph, ctx, b->device);
    } else if (n.type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
      GraphMemBlock* b = find_block_locked(static_cast<std::uintptr_t>(n.free_ptr));
      if (!b || !b->live) continue;  // freeing what is not allocated is the program's error
      g.allocations.erase(b->base);
      end_allocation_locked(b);
    }
  }
  return CUDA_SUCCESS;
}

void graph_memory_exec_destroyed_locked(GraphExec* exec) {
  if (exec->graph && exec->graph->instance == exec) exec->graph->instance = nullptr;
  std::vector<std::shared_ptr<GraphMemBlock>> blocks;
  for (GraphNode& n : exec->nodes)
    if (n.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n.block && n.block->exec == exec) blocks.push_back(n.block);
  for (auto& b : blocks) {
    b->exec = nullptr;
    if (!b->live) unmap_block_locked(b.get());  // back to the pool, which keeps it until a trim
    maybe_release_block_locked(b.get());
  }
}

void graph_memory_graph_destroyed_locked(Graph* g) {
  // "Graph destruction does not automatically free any live graph-allocated memory."
  if (g->instance) g->instance->graph = nullptr;
  std::vector<std::shared_ptr<GraphMemBlock>> blocks;
  for (auto& n : g->nodes)
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n->block) blocks.push_back(n->block);
  for (auto& b : blocks) {
    b->owner = nullptr;
    maybe_release_block_locked(b.get());
  }
}

void graph_allocation_freed_locked(std::uintptr_t base) {
  if (GraphMemBlock* b = find_block_locked(base)) end_allocation_locked(b);
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out || !params || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto* graph = reinterpret_cast<Graph*>(hg);
  // "Allocation and free nodes cannot be added to the returned graph" (cuGraphChildGraphNodeGetGraph).
  if (!is_live_locked(graph) || graph->parent) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; ++i)
    if (!is_live_locked(reinterpret_cast<GraphNode*>(deps[i]))) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<GraphMemBlock> block;
  CUDA_MEM_ALLOC_NODE_PARAMS p = *params;
  if (CUresult r = graph_make_alloc_block_locked(graph, p, g.device_count, &block)) return r;
  GraphNode* n = add_node_locked(graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC, deps, ndeps);
  graph_attach_alloc_node_locked(n, p, std::move(block));
  params->dptr = p.dptr;  // "it returns the address of the allocation in nodeParams.dptr"
  *out = reinterpret_cast<CUgraphNode>(n);
  return CUDA_SUCCESS;
}

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hn, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* n = reinterpret_cast<GraphNode*>(hn);
  if (!is_live_locked(n) || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
  *out = n->alloc;
  // "The poolProps and accessDescs returned in params_out, are owned by the node."
  out->accessDescs = n->access.empty() ? nullptr : n->access.data();
  out->accessDescCount = n->access.size();
  return CUDA_SUCCESS;
}

CUresult cuGraphAddMemFreeNode(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps, CUdeviceptr dptr) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* graph = reinterpret_cast<Graph*>(hg);
  // "Allocation and free nodes cannot be added to the returned graph" (cuGraphChildGraphNodeGetGraph).
  if (!is_live_locked(graph) || graph->parent) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; ++i)
    if (!is_live_locked(reinterpret_cast<GraphNode*>(deps[i]))) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = graph_check_free_node_locked(graph, dptr)) return r;
  GraphNode* n = add_node_locked(graph, CU_GRAPH_NODE_TYPE_MEM_FREE, deps, ndeps);
  graph_add_free_node_locked(n, dptr);
  *out = reinterpret_cast<CUgraphNode>(n);
  return CUDA_SUCCESS;
}

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hn, CUdeviceptr* out) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* n = reinterpret_cast<GraphNode*>(hn);
  if (!is_live_locked(n) || n->type != CU_GRAPH_NODE_TYPE_MEM_FREE) return CUDA_ERROR_INVALID_VALUE;
  *out = n->free_ptr;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  std::lock_guard<std::mutex> lk(driver().mu);
  GraphMemoryState& st = state_locked();
  // Unmap what no live allocation and no queued or running launch uses...
  for (auto& [base, b] : st.blocks)
    if (b->device == dev && b->mapped && !b->live && !(b->exec && b->exec->in_flight > 0)) unmap_block_locked(b.get());
  // ...and give the device back every whole chunk the pool no longer needs.
  GraphMemPool& pool = st.pools[dev];
  const std::uint64_t keep = chunk_round(pool.used);
  if (pool.reserved > keep) {
    uncharge_device(dev, pool.reserved - keep);
    pool.reserved = keep;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  if (CUresult r = ensure_initialized()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  const GraphMemPool& pool = state_locked().pools[dev];
  auto* v = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      *v = pool.used;
      break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      *v = pool.used_high;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *v = pool.reserved;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      *v = pool.reserved_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  if (CUresult r = ensure_initialized()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  GraphMemPool& pool = state_locked().pools[dev];
  // Only the high watermarks can be set, and "can only be reset to zero".
  if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      pool.used_high = pool.used;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      pool.reserved_high = pool.reserved;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
