// Graph memory nodes. A graph's allocations take physical memory from the device's graph memory
// pool when the executable graph is first launched or uploaded (at instantiation only with
// CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, which uploads then) and keep it between launches; the pool
// keeps what graphs freed until cuDeviceGraphMemTrim, which unmaps what no launch and no live
// allocation uses, so that the next launch maps it again. A device's charge follows
// CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, and an executable graph with allocation nodes (added by
// cuGraphAddMemAllocNode, captured from cuMemAllocAsync, or in a child graph moved into it) has its
// memory reserved against the cap before each launch or upload that may map it: the first, and the
// first after a trim. A launch of any other graph costs one relaxed load.
#include <array>
#include <atomic>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "accounts.h"
#include "around.h"
#include "coordinator_layout.h"
#include "fork_guard.h"
#include "hook_support.h"
#include "launch_gate.h"

namespace slice::shim {
namespace {

struct GraphExecMemory {
  std::array<std::uint64_t, kMaxDevices> bytes{};  // per device: what its allocation nodes ask for, chunk-rounded
  bool mapped = false;  // launched or uploaded, and no trim of its devices since: it holds its memory
};

std::mutex g_mu;
// Only executable graphs with allocations, guarded by g_mu. Made on first use: nothing may run at
// load time (and no static guard: a fork may come at any time).
std::unordered_map<CUgraphExec, GraphExecMemory>* g_execs = nullptr;
std::unordered_map<CUgraphExec, GraphExecMemory>& execs() {
  if (g_execs == nullptr) g_execs = new std::unordered_map<CUgraphExec, GraphExecMemory>();
  return *g_execs;
}
std::atomic<std::size_t> g_exec_count{0};  // of those, not mapped yet: while 0, launches take no lock

std::uint64_t graph_attribute(CUdevice dev, CUgraphMem_attribute attribute) {
  cuuint64_t value = 0;
  const auto get = SLICE_REAL(cuDeviceGetGraphMemAttribute);
  if (get == nullptr || get(dev, attribute, &value) != CUDA_SUCCESS) return 0;
  return value;
}

// What the allocation nodes of a graph ask for, per device (where each node's pool lives), those of
// its child graphs included (a child graph moved in with cuGraphAddNode may hold memory nodes).
bool graph_allocations(Session& s, CUgraph graph, GraphExecMemory& out, int depth = 0) {
  const auto get_nodes = SLICE_REAL(cuGraphGetNodes);
  const auto get_type = SLICE_REAL(cuGraphNodeGetType);
  const auto get_params = SLICE_REAL(cuGraphMemAllocNodeGetParams);
  const auto get_child = SLICE_REAL(cuGraphChildGraphNodeGetGraph);
  if (get_nodes == nullptr || get_type == nullptr || get_params == nullptr || depth > 16) return false;
  std::size_t n = 0;
  if (get_nodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0) return false;
  std::vector<CUgraphNode> nodes(n);
  if (get_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return false;
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    CUgraphNodeType type;
    if (get_type(nodes[i], &type) != CUDA_SUCCESS) continue;
    CUgraph child = nullptr;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH && get_child != nullptr && get_child(nodes[i], &child) == CUDA_SUCCESS) {
      any |= graph_allocations(s, child, out, depth + 1);
      continue;
    }
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    if (type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || get_params(nodes[i], &params) != CUDA_SUCCESS) continue;
    const int device = s.index_of(params.poolProps.location.id);
    if (device < 0) continue;
    any = true;
    out.bytes[device] += pool_growth(params.bytesize);
  }
  return any;
}

// Maps the memory of `m` with `call` (a launch, an upload, an instantiation that uploads): what
// each device's graph pool must add is reserved against the cap first, then the charge is set to
// what the pools hold.
template <typename Call>
CUresult charge_mapping(Session& s, const GraphExecMemory& m, const char* what, Call&& call) {
  std::array<std::uint64_t, kMaxDevices> growth{};
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    if (m.bytes[d] == 0) continue;
    const CUdevice dev = s.devices[d].handle;
    const std::uint64_t reserved = graph_attribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
    const std::uint64_t used = graph_attribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
    const std::uint64_t idle = reserved > used ? reserved - used : 0;
    growth[d] = m.bytes[d] > idle ? m.bytes[d] - idle : 0;
    if (growth[d] != 0 && !charge(s, static_cast<int>(d), growth[d], what)) {
      for (std::size_t e = 0; e < d; ++e) uncharge(s, static_cast<int>(e), growth[e]);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  const CUresult rc = call();
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    if (m.bytes[d] == 0) continue;
    settle_graph_memory(s, static_cast<int>(d));
    uncharge(s, static_cast<int>(d), growth[d]);
  }
  return rc;
}

void record_exec(CUgraphExec exec, const GraphExecMemory& m) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (const auto it = execs().find(exec); it != execs().end() && !it->second.mapped) g_exec_count.fetch_sub(1);
  execs()[exec] = m;
  if (!m.mapped) g_exec_count.fetch_add(1);
}

// `upload`: CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, which maps the memory at once.
template <typename Call>
CUresult instantiate(CUgraphExec* exec, CUgraph graph, bool upload, Call&& call) {
  return accounted(
      [&](Session& s) {
        GraphExecMemory m;
        if (exec == nullptr || !graph_allocations(s, graph, m)) return call();
        const CUresult rc = upload ? charge_mapping(s, m, "cuGraphInstantiate", call) : call();
        if (rc == CUDA_SUCCESS) {
          m.mapped = upload;
          record_exec(*exec, m);
        }
        return rc;
      },
      call);
}

// Launch or upload: the first one, and the first after a trim, maps the graph's memory.
template <typename Call>
CUresult map_and_run(CUgraphExec exec, const char* what, Call&& call) {
  if (g_exec_count.load(std::memory_order_relaxed) == 0) {  // the common case: nothing left to map
    if (session_state() == SessionState::failed) return kFailedClosed;
    return call();
  }
  return accounted(
      [&](Session& s) {
        GraphExecMemory m;
        {
          std::lock_guard<std::mutex> lock(g_mu);
          const auto it = execs().find(exec);
          if (it == execs().end() || it->second.mapped) return call();
          m = it->second;
        }
        const CUresult rc = charge_mapping(s, m, what, call);
        if (rc == CUDA_SUCCESS) {
          std::lock_guard<std::mutex> lock(g_mu);
          const auto it = execs().find(exec);
          if (it != execs().end() && !it->second.mapped) {
            it->second.mapped = true;
            g_exec_count.fetch_sub(1);
          }
        }
        return rc;
      },
      call);
}

// After a trim of `device`: its graphs may map their memory again at their next launch.
void trimmed(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& [exec, m] : execs())
    if (m.mapped && m.bytes[device] != 0) {
      m.mapped = false;
      g_exec_count.fetch_add(1);
    }
}

}  // namespace

bool settle_graph_memory(Session& s, int device) {
  std::lock_guard<std::mutex> lock(s.pools->mu);
  const std::uint64_t held = graph_attribute(s.devices[device].handle, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
  std::uint64_t& charged = s.pools->graph_charged[device];
  const bool went_down = held < charged;
  settle_charge(s, device, charged, held);
  charged = held;
  return went_down;
}

// A graph launch is a launch: it passes the compute gate, then maps its memory if it has any.
CUresult graph_launch(CUgraphExec exec, CUstream stream, bool ptsz, RealCall call) {
  return gated_launch(stream, ptsz, [&] { return map_and_run(exec, "cuGraphLaunch", call); });
}

// A forked child has none of its parent's graphs, and no thread that may have held the lock.
void graph_memory_after_fork_in_child() noexcept {
  new (&g_mu) std::mutex();
  g_execs = nullptr;
  g_exec_count.store(0);
}

}  // namespace slice::shim

using namespace slice::shim;

namespace {
bool uploads(const CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return params != nullptr && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0;
}
}  // namespace

SLICE_HOOK_BODY(CUresult, cuGraphInstantiateWithFlags)
(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  return instantiate(phGraphExec, hGraph, (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0,
                     [&] { return SLICE_CALL_REAL(cuGraphInstantiateWithFlags, phGraphExec, hGraph, flags); });
}

SLICE_HOOK_BODY(CUresult, cuGraphInstantiateWithParams)
(CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return instantiate(phGraphExec, hGraph, uploads(instantiateParams), [&] {
    return SLICE_CALL_REAL(cuGraphInstantiateWithParams, phGraphExec, hGraph, instantiateParams);
  });
}

SLICE_HOOK_BODY(CUresult, cuGraphInstantiateWithParams_ptsz)
(CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return instantiate(phGraphExec, hGraph, uploads(instantiateParams), [&] {
    return SLICE_CALL_REAL(cuGraphInstantiateWithParams_ptsz, phGraphExec, hGraph, instantiateParams);
  });
}

SLICE_HOOK_BODY(CUresult, cuGraphInstantiate)
(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer, size_t bufferSize) {
  return instantiate(phGraphExec, hGraph, false, [&] {
    return SLICE_CALL_REAL(cuGraphInstantiate, phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  });
}

SLICE_HOOK_BODY(CUresult, cuGraphInstantiate_v2)
(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer, size_t bufferSize) {
  return instantiate(phGraphExec, hGraph, false, [&] {
    return SLICE_CALL_REAL(cuGraphInstantiate_v2, phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  });
}

SLICE_HOOK_BODY(CUresult, cuGraphUpload)(CUgraphExec hGraphExec, CUstream hStream) {
  return map_and_run(hGraphExec, "cuGraphUpload", [&] { return SLICE_CALL_REAL(cuGraphUpload, hGraphExec, hStream); });
}

SLICE_HOOK_BODY(CUresult, cuGraphUpload_ptsz)(CUgraphExec hGraphExec, CUstream hStream) {
  return map_and_run(hGraphExec, "cuGraphUpload",
                     [&] { return SLICE_CALL_REAL(cuGraphUpload_ptsz, hGraphExec, hStream); });
}

SLICE_HOOK_BODY(CUresult, cuGraphExecDestroy)(CUgraphExec hGraphExec) {
  return after_success([&] { return SLICE_CALL_REAL(cuGraphExecDestroy, hGraphExec); },
                       [&](Session&) {
                         std::lock_guard<std::mutex> lock(g_mu);
                         const auto it = execs().find(hGraphExec);
                         if (it != execs().end()) {
                           if (!it->second.mapped) g_exec_count.fetch_sub(1);
                           execs().erase(it);
                         }
                       });
}

SLICE_HOOK_BODY(CUresult, cuDeviceGraphMemTrim)(CUdevice device) {
  return after_success([&] { return SLICE_CALL_REAL(cuDeviceGraphMemTrim, device); },
                       [&](Session& s) {
                         const int index = s.index_of(device);
                         if (index < 0) return;
                         settle_graph_memory(s, index);
                         trimmed(index);
                       });
}
