// Kernel launches (cuLaunchKernel, Ex, cooperative, _ptsz), CUDA graphs of kernel, empty, host and
// memory nodes (drv_graph_memory.cpp), built by hand or captured from a stream, and cuGraphLaunch.
#include <cstring>

#include "capture.h"

namespace simgpu {

std::uint64_t kernel_duration_ns(const Function* f, void** params, void** extra) {
  if (!f->spin) return kDefaultKernelNs;
  std::uint64_t ns = 0;
  if (params && params[0]) {
    std::memcpy(&ns, params[0], sizeof ns);
  } else if (extra) {
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER && e[1]) {
        std::memcpy(&ns, e[1], sizeof ns);
        break;
      }
    }
  }
  return ns;
}

GraphNode* add_node_locked(Graph* g, CUgraphNodeType type, const CUgraphNode* deps, std::size_t ndeps) {
  auto n = std::make_unique<GraphNode>();
  n->type = type;
  n->graph = g;
  for (std::size_t i = 0; i < ndeps; ++i) n->deps.push_back(reinterpret_cast<GraphNode*>(deps[i]));
  GraphNode* raw = n.get();
  g->nodes.push_back(std::move(n));
  add_live_locked(raw);
  return raw;
}

void destroy_graph_locked(Graph* g) {
  for (auto& n : g->nodes)
    if (n->child) destroy_graph_locked(n->child);  // a child graph goes with its node
  graph_memory_graph_destroyed_locked(g);
  for (auto& n : g->nodes) remove_live_locked(n.get());
  remove_live_locked(g);
  delete g;
}

namespace {

// An executable graph runs its nodes one after another: a child graph's nodes stand in for its node.
void flatten_into(const Graph& g, std::vector<GraphNode>& out) {
  for (const auto& n : g.nodes) {
    if (n->child) {
      flatten_into(*n->child, out);
      continue;
    }
    out.push_back(*n);
    out.back().origin = n.get();
  }
}

// A copy of `from` for a child graph node (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE), dependencies
// mapped onto the copies; graphs with memory nodes cannot be cloned.
Graph* clone_graph_locked(const Graph& from) {
  auto* g = new Graph();
  add_live_locked(g);
  std::map<const GraphNode*, GraphNode*> copies;
  for (const auto& n : from.nodes) {
    auto c = std::make_unique<GraphNode>(*n);
    c->graph = g;
    for (GraphNode*& d : c->deps) d = copies[d];
    if (n->child) {
      c->child = clone_graph_locked(*n->child);
      c->child->parent = c.get();
    }
    copies[n.get()] = c.get();
    add_live_locked(c.get());
    g->nodes.push_back(std::move(c));
  }
  return g;
}

}  // namespace

namespace {

CUresult check_launch_locked(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shmem) {
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
  if (gx > 2147483647u || gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (bx > 1024 || by > 1024 || bz > 64 || std::uint64_t(bx) * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (shmem > static_cast<unsigned>(f->max_dynamic_shared)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// A launch on a capturing stream becomes a node that follows the stream's last captured node.
void capture_locked(Stream* s, GraphNode proto) {
  GraphNode* n = capture_node_locked(s, proto.type);
  n->func = proto.func;
  n->kernel_ns = proto.kernel_ns;
  n->kernel = proto.kernel;
  n->host_fn = proto.host_fn;
  n->host_data = proto.host_data;
}

CUresult launch(Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned shmem, CUstream hs, void** params, void** extra, bool pt) {
  if (CUresult r = ensure_initialized()) return r;
  if (params && extra) return CUDA_ERROR_INVALID_VALUE;
  // One lock for the whole launch: the executor takes the same lock for every op it runs.
  std::lock_guard<std::mutex> lk(driver().mu);
  if (CUresult r = check_launch_locked(f, gx, gy, gz, bx, by, bz, shmem)) return r;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream_locked(hs, pt, &s)) return r;
  if (CUresult r = capture_submit_check_locked(s, "cuLaunchKernel")) return r;
  if (s->capture) {
    GraphNode proto;
    proto.type = CU_GRAPH_NODE_TYPE_KERNEL;
    proto.func = f;
    proto.kernel_ns = kernel_duration_ns(f, params, extra);
    capture_locked(s, proto);
    return CUDA_SUCCESS;
  }
  Op op;
  op.kind = Op::Kind::kernel;
  op.kernel_ns = kernel_duration_ns(f, params, extra);
  enqueue_locked(s, std::move(op));
  return CUDA_SUCCESS;
}

CUresult launch_ex(const CUlaunchConfig* c, CUfunction f, void** params, void** extra, bool pt) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  if (c->numAttrs && !c->attrs) return CUDA_ERROR_INVALID_VALUE;
  return launch(reinterpret_cast<Function*>(f), c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                c->blockDimZ, c->sharedMemBytes, c->hStream, params, extra, pt);
}

Graph* live_graph_locked(CUgraph h) {
  auto* g = reinterpret_cast<Graph*>(h);
  return is_live_locked(g) ? g : nullptr;
}

bool has_memory_nodes(const GraphExec* exec) {
  for (const GraphNode& n : exec->nodes)
    if (n.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n.type == CU_GRAPH_NODE_TYPE_MEM_FREE) return true;
  return false;
}

void delete_exec_locked(GraphExec* exec) {
  graph_memory_exec_destroyed_locked(exec);
  delete exec;
}

CUresult graph_launch(CUgraphExec he, CUstream hs, bool pt) {
  if (CUresult r = ensure_initialized()) return r;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hs, pt, &s)) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto* exec = reinterpret_cast<GraphExec*>(he);
  if (!is_live_locked(exec)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = capture_submit_check_locked(s, "cuGraphLaunch")) return r;
  if (s->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // launching a graph is not captured here
  // Memory nodes: physical memory at the first launch (CUDA_ERROR_OUT_OF_MEMORY when the device
  // lacks it), and the allocations' lifetimes; an error leaves nothing queued.
  const bool memory = has_memory_nodes(exec);
  if (memory) {
    if (CUresult r = graph_memory_launch_locked(exec, s->ctx)) return r;
  }
  // Nodes run one after another in topological order: a device runs one context's work at a time.
  for (const GraphNode& n : exec->nodes) {
    Op op;
    if (n.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      op.kind = Op::Kind::kernel;
      op.kernel_ns = n.kernel_ns;
    } else if (n.type == CU_GRAPH_NODE_TYPE_HOST) {
      op.kind = Op::Kind::host;
      CUhostFn fn = n.host_fn;
      void* data = n.host_data;
      op.host = [fn, data] { run_host_function([&] { fn(data); }); };
    } else if (n.work) {  // a captured copy or set
      op.kind = Op::Kind::host;
      op.host = n.work;
    } else {
      continue;
    }
    enqueue_locked(s, std::move(op));
  }
  if (memory) {
    // A launch queued or running keeps its graph's memory through cuDeviceGraphMemTrim; its end
    // also completes a cuGraphExecDestroy that came while it ran.
    exec->in_flight++;
    Op end;
    end.kind = Op::Kind::host;
    end.host = [exec] {
      std::lock_guard<std::mutex> lk2(driver().mu);
      if (--exec->in_flight == 0 && exec->destroyed) delete_exec_locked(exec);
    };
    enqueue_locked(s, std::move(end));
  }
  return CUDA_SUCCESS;
}

CUresult graph_upload(CUgraphExec he, CUstream hs, bool pt) {
  if (CUresult r = ensure_initialized()) return r;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hs, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* exec = reinterpret_cast<GraphExec*>(he);
  if (!is_live_locked(exec)) return CUDA_ERROR_INVALID_HANDLE;
  // "Uses memory cached by stream to back the allocations owned by hGraphExec" (cuGraphUpload).
  return graph_memory_upload_locked(exec);
}

CUresult instantiate(CUgraphExec* out, CUgraph hg, unsigned long long flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  // DEVICE_LAUNCH "cannot be used in conjunction with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH".
  if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) && (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Graph* g = live_graph_locked(hg);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  auto exec = std::make_unique<GraphExec>();
  if (g->parent) return CUDA_ERROR_INVALID_VALUE;  // a child graph is instantiated with its parent
  flatten_into(*g, exec->nodes);
  exec->flags = flags;
  if (CUresult r = graph_memory_instantiate_locked(g, exec.get())) return r;
  // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: an upload right after instantiation.
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
    if (CUresult r = graph_memory_upload_locked(exec.get())) {
      delete_exec_locked(exec.release());
      return r;
    }
  }
  add_live_locked(exec.get());
  *out = reinterpret_cast<CUgraphExec>(exec.release());
  return CUDA_SUCCESS;
}

CUresult add_kernel_node(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps, Function* f,
                         const CUDA_KERNEL_NODE_PARAMS& p) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  if (CUresult r = check_launch_locked(f, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ,
                                       p.sharedMemBytes))
    return r;
  Graph* g = live_graph_locked(hg);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; ++i)
    if (!is_live_locked(reinterpret_cast<GraphNode*>(deps[i]))) return CUDA_ERROR_INVALID_VALUE;
  GraphNode* n = add_node_locked(g, CU_GRAPH_NODE_TYPE_KERNEL, deps, ndeps);
  n->func = f;
  n->kernel = p;
  n->kernel_ns = kernel_duration_ns(f, p.kernelParams, p.extra);  // parameters are copied at this call
  *out = reinterpret_cast<CUgraphNode>(n);
  return CUDA_SUCCESS;
}

Function* node_function(const CUDA_KERNEL_NODE_PARAMS& p) {
  return p.kern ? reinterpret_cast<Function*>(p.kern) : reinterpret_cast<Function*>(p.func);
}

}  // namespace
}  // namespace simgpu

using namespace simgpu;

extern "C" {

#define SIM_LAUNCH_FAMILY(SUFFIX, PT)                                                                               \
  CUresult cuLaunchKernel##SUFFIX(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,    \
                                  unsigned bz, unsigned shmem, CUstream s, void** params, void** extra) {           \
    return launch(reinterpret_cast<Function*>(f), gx, gy, gz, bx, by, bz, shmem, s, params, extra, PT);             \
  }                                                                                                                 \
  CUresult cuLaunchCooperativeKernel##SUFFIX(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,      \
                                             unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params) { \
    return launch(reinterpret_cast<Function*>(f), gx, gy, gz, bx, by, bz, shmem, s, params, nullptr, PT);           \
  }                                                                                                                 \
  CUresult cuLaunchKernelEx##SUFFIX(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {           \
    return launch_ex(c, f, params, extra, PT);                                                                      \
  }                                                                                                                 \
  CUresult cuGraphLaunch##SUFFIX(CUgraphExec e, CUstream s) { return graph_launch(e, s, PT); }                      \
  CUresult cuGraphUpload##SUFFIX(CUgraphExec e, CUstream s) { return graph_upload(e, s, PT); }

SIM_LAUNCH_FAMILY(, false)
SIM_LAUNCH_FAMILY(_ptsz, true)

// The deprecated launch API: a block shape, shared memory and a parameter buffer set on the function
// beforehand. Still exported by the CUDA 13 driver, so still a way to launch.
CUresult cuFuncSetBlockShape(CUfunction hf, int x, int y, int z) {
  if (CUresult r = ensure_initialized()) return r;
  if (x <= 0 || y <= 0 || z <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(hf);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  f->block[0] = static_cast<unsigned>(x), f->block[1] = static_cast<unsigned>(y),
  f->block[2] = static_cast<unsigned>(z);
  return CUDA_SUCCESS;
}

CUresult cuFuncSetSharedSize(CUfunction hf, unsigned int bytes) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(hf);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  f->shared_bytes = bytes;
  return CUDA_SUCCESS;
}

CUresult cuParamSetSize(CUfunction hf, unsigned int bytes) {
  if (CUresult r = ensure_initialized()) return r;
  if (bytes > 4096) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(hf);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  f->param_buffer.resize(bytes);
  return CUDA_SUCCESS;
}

CUresult cuParamSetv(CUfunction hf, int offset, void* ptr, unsigned int bytes) {
  if (CUresult r = ensure_initialized()) return r;
  if (offset < 0 || (!ptr && bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(hf);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (static_cast<std::size_t>(offset) + bytes > f->param_buffer.size()) return CUDA_ERROR_INVALID_VALUE;
  if (bytes) std::memcpy(f->param_buffer.data() + offset, ptr, bytes);
  return CUDA_SUCCESS;
}

CUresult cuParamSeti(CUfunction hf, int offset, unsigned int value) {
  return cuParamSetv(hf, offset, &value, sizeof value);
}
CUresult cuParamSetf(CUfunction hf, int offset, float value) { return cuParamSetv(hf, offset, &value, sizeof value); }

CUresult cuLaunchGridAsync(CUfunction hf, int grid_width, int grid_height, CUstream hs) {
  if (CUresult r = ensure_initialized()) return r;
  if (grid_width <= 0 || grid_height <= 0) return CUDA_ERROR_INVALID_VALUE;
  unsigned block[3];
  unsigned shared = 0;
  std::vector<unsigned char> buffer;
  {
    std::lock_guard<std::mutex> lk(driver().mu);
    auto* f = reinterpret_cast<Function*>(hf);
    if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
    std::memcpy(block, f->block, sizeof block);
    shared = f->shared_bytes;
    buffer = f->param_buffer;
  }
  std::size_t size = buffer.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  return launch(reinterpret_cast<Function*>(hf), static_cast<unsigned>(grid_width), static_cast<unsigned>(grid_height),
                1, block[0], block[1], block[2], shared, hs, nullptr, buffer.empty() ? nullptr : extra, false);
}

CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  return SIM_EXPORT_CALL(cuLaunchGridAsync)(f, grid_width, grid_height, nullptr);
}

CUresult cuLaunch(CUfunction f) { return SIM_EXPORT_CALL(cuLaunchGridAsync)(f, 1, 1, nullptr); }

CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* list, unsigned int count, unsigned int flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (!list || count == 0 || (flags & ~3u)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    const CUDA_LAUNCH_PARAMS& p = list[i];
    if (CUresult r = launch(reinterpret_cast<Function*>(p.function), p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX,
                            p.blockDimY, p.blockDimZ, p.sharedMemBytes, p.hStream, p.kernelParams, nullptr, false))
      return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* g = new Graph();
  add_live_locked(g);
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hg) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  Graph* g = live_graph_locked(hg);
  if (!g || g->parent) return CUDA_ERROR_INVALID_VALUE;  // a child graph goes with its parent
  destroy_graph_locked(g);
  return CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                 const CUDA_KERNEL_NODE_PARAMS* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  return add_kernel_node(out, g, deps, n, node_function(*p), *p);
}

CUresult cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS v2{};
  v2.func = p->func;
  v2.gridDimX = p->gridDimX, v2.gridDimY = p->gridDimY, v2.gridDimZ = p->gridDimZ;
  v2.blockDimX = p->blockDimX, v2.blockDimY = p->blockDimY, v2.blockDimZ = p->blockDimZ;
  v2.sharedMemBytes = p->sharedMemBytes;
  v2.kernelParams = p->kernelParams;
  v2.extra = p->extra;
  return add_kernel_node(out, g, deps, n, reinterpret_cast<Function*>(p->func), v2);
}

CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hn, CUDA_KERNEL_NODE_PARAMS* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* n = reinterpret_cast<GraphNode*>(hn);
  if (!is_live_locked(n) || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  *p = n->kernel;
  return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hn, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  Function* f = node_function(*p);
  if (!is_live(f)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* n = reinterpret_cast<GraphNode*>(hn);
  if (!is_live_locked(n) || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  n->func = f;
  n->kernel = *p;
  n->kernel_ns = kernel_duration_ns(f, p->kernelParams, p->extra);
  return CUDA_SUCCESS;
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec he, CUgraphNode hn, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  Function* f = node_function(*p);
  if (!is_live(f)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* exec = reinterpret_cast<GraphExec*>(he);
  auto* node = reinterpret_cast<GraphNode*>(hn);
  if (!is_live_locked(exec) || !is_live_locked(node)) return CUDA_ERROR_INVALID_VALUE;
  // The exec holds copies of the nodes: find the copy of this one.
  for (GraphNode& copy : exec->nodes) {
    if (copy.origin != node) continue;
    copy.func = f;
    copy.kernel = *p;
    copy.kernel_ns = kernel_duration_ns(f, p->kernelParams, p->extra);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphAddEmptyNode(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t n) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Graph* g = live_graph_locked(hg);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUgraphNode>(add_node_locked(g, CU_GRAPH_NODE_TYPE_EMPTY, deps, n));
  return CUDA_SUCCESS;
}

CUresult cuGraphAddHostNode(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t n,
                            const CUDA_HOST_NODE_PARAMS* p) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out || !p || !p->fn || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Graph* g = live_graph_locked(hg);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  GraphNode* node = add_node_locked(g, CU_GRAPH_NODE_TYPE_HOST, deps, n);
  node->host_fn = p->fn;
  node->host_data = p->userData;
  *out = reinterpret_cast<CUgraphNode>(node);
  return CUDA_SUCCESS;
}

// Child graph nodes. The legacy call clones the child, which may then hold no memory nodes;
// cuGraphAddNode with CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE moves it in, memory nodes and all
// (CUDA 12.9), and the child then lives and dies with its parent.
CUresult add_child_graph_node(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t n, CUgraph hchild,
                              bool move) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out || (n && !deps)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Graph* g = live_graph_locked(hg);
  Graph* child = live_graph_locked(hchild);
  if (!g || !child || child == g || child->parent) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i)
    if (!is_live_locked(reinterpret_cast<GraphNode*>(deps[i]))) return CUDA_ERROR_INVALID_VALUE;
  if (!move && child->has_memory_nodes) return CUDA_ERROR_INVALID_VALUE;
  if (move && child->instance) return CUDA_ERROR_INVALID_VALUE;  // "cannot be moved" once instantiated
  GraphNode* node = add_node_locked(g, CU_GRAPH_NODE_TYPE_GRAPH, deps, n);
  node->child = move ? child : clone_graph_locked(*child);
  node->child->parent = node;
  if (node->child->has_memory_nodes) g->has_memory_nodes = true;
  *out = reinterpret_cast<CUgraphNode>(node);
  return CUDA_SUCCESS;
}

CUresult cuGraphAddChildGraphNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUgraph child) {
  return add_child_graph_node(out, g, deps, n, child, false);
}

// cuGraphAddNode: child graph nodes only (the other kinds have their own calls here).
CUresult cuGraphAddNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t n,
                           CUgraphNodeParams* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  if (edges) return CUDA_ERROR_NOT_SUPPORTED;
  if (params->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_NOT_SUPPORTED;
  const CUgraphChildGraphNodeOwnership own = params->graph.ownership;
  if (own != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE && own != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
    return CUDA_ERROR_INVALID_VALUE;
  const CUresult r =
      add_child_graph_node(out, g, deps, n, params->graph.graph, own == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);
  if (r == CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lk(driver().mu);
    params->graph.graph = reinterpret_cast<CUgraph>(reinterpret_cast<GraphNode*>(*out)->child);  // the owned graph
  }
  return r;
}

CUresult cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUgraphNodeParams* params) {
  return cuGraphAddNode_v2(out, g, deps, nullptr, n, params);
}

CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hn, CUgraph* out) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* n = reinterpret_cast<GraphNode*>(hn);
  if (!is_live_locked(n) || n->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUgraph>(n->child);
  return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph hg, CUgraphNode* nodes, size_t* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Graph* g = live_graph_locked(hg);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (!nodes) {
    *count = g->nodes.size();
    return CUDA_SUCCESS;
  }
  std::size_t n = std::min(*count, g->nodes.size());
  for (std::size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<CUgraphNode>(g->nodes[i].get());
  *count = n;
  return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetType(CUgraphNode hn, CUgraphNodeType* type) {
  if (!type) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* n = reinterpret_cast<GraphNode*>(hn);
  if (!is_live_locked(n)) return CUDA_ERROR_INVALID_VALUE;
  *type = n->type;
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  return instantiate(out, g, flags);
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  CUresult r = instantiate(out, g, p ? p->flags : 0);
  if (p) p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return SIM_EXPORT_CALL(cuGraphInstantiateWithParams)(out, g, p);
}

CUresult cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode* err, char* log, size_t n) {
  if (err) *err = nullptr;
  if (log && n) log[0] = '\0';
  return instantiate(out, g, 0);
}

CUresult cuGraphInstantiate(CUgraphExec* out, CUgraph g, CUgraphNode* err, char* log, size_t n) {
  return SIM_EXPORT_CALL(cuGraphInstantiate_v2)(out, g, err, log, n);
}

CUresult cuGraphExecDestroy(CUgraphExec he) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* exec = reinterpret_cast<GraphExec*>(he);
  if (!is_live_locked(exec)) return CUDA_ERROR_INVALID_VALUE;
  remove_live_locked(exec);
  // The graph may be instantiated again at once; the memory of a launch still queued or running
  // stays with this one until that launch ends.
  if (exec->graph && exec->graph->instance == exec) exec->graph->instance = nullptr;
  exec->graph = nullptr;
  if (exec->in_flight > 0)
    exec->destroyed = true;
  else
    delete_exec_locked(exec);
  return CUDA_SUCCESS;
}

}  // extern "C"
