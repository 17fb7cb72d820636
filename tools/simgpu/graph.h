// CUDA graphs as the simulator keeps them, shared by drv_launch.cpp (nodes, instantiation, launch)
// and drv_graph_memory.cpp (memory allocation and free nodes, the devices' graph memory pools).
#pragma once

#include <memory>
#include <vector>

#include "driver.h"

namespace simgpu {

struct GraphMemBlock;  // drv_graph_memory.cpp: the fixed address range of one allocation node

struct GraphNode {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  Function* func = nullptr;
  std::uint64_t kernel_ns = 0;
  CUDA_KERNEL_NODE_PARAMS kernel{};  // as given (pointers to the caller's parameters are not kept)
  CUhostFn host_fn = nullptr;
  void* host_data = nullptr;
  std::function<void()> work;         // a captured copy or set: what it does when the graph runs
  struct Graph* child = nullptr;      // a child graph node's graph, owned by the node (destroyed with it)
  const GraphNode* origin = nullptr;  // in an executable graph: the node this copy was made from
  std::vector<GraphNode*> deps;
  struct Graph* graph = nullptr;
  // Memory nodes: an allocation node's range (shared with the executable graphs' copies of the
  // node), its parameters as given with dptr filled in, and its own copy of the access descriptors;
  // a free node's address.
  std::shared_ptr<GraphMemBlock> block;
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  std::vector<CUmemAccessDesc> access;
  CUdeviceptr free_ptr = 0;
};

struct Graph {
  std::vector<std::unique_ptr<GraphNode>> nodes;  // in insertion order, which is a topological order
  bool has_memory_nodes = false;                  // its own, or those of a child graph moved into it
  GraphNode* parent = nullptr;                    // a child graph: the node that owns it (it cannot be destroyed or
                                                  // instantiated by itself)
  struct GraphExec* instance = nullptr;           // with memory nodes: its one executable graph, while that lives
};

struct GraphExec {
  std::vector<GraphNode> nodes;  // a snapshot: later edits of the graph do not change it
  Graph* graph = nullptr;        // the graph with memory nodes it was made from, while that lives
  unsigned long long flags = 0;  // CUgraphInstantiate_flags
  int in_flight = 0;             // launches queued and not finished, guarded by g.mu
  bool destroyed = false;        // cuGraphExecDestroy while in flight: freed by the last launch's end
};

// Capture: a node appended to the graph the stream is capturing, after the stream's last captured
// work (drv_capture.cpp; g.mu held).
GraphNode* capture_node_locked(Stream* s, CUgraphNodeType type);
GraphNode* add_node_locked(Graph* g, CUgraphNodeType type, const CUgraphNode* deps, std::size_t ndeps);
void destroy_graph_locked(Graph* g);  // with its nodes and what they hold (g.mu held)

// --- drv_graph_memory.cpp, all with g.mu held ---
// Checks an allocation node's parameters and gives it its address range (params.dptr); then, once
// the node exists, attaches the range and the parameters to it.
CUresult graph_make_alloc_block_locked(Graph* owner, CUDA_MEM_ALLOC_NODE_PARAMS& params, int device_count,
                                       std::shared_ptr<GraphMemBlock>* out);
void graph_attach_alloc_node_locked(GraphNode* node, const CUDA_MEM_ALLOC_NODE_PARAMS& params,
                                    std::shared_ptr<GraphMemBlock> block);
// Checks that a free node of `dptr` may join graph `g`; then, once the node exists, records it.
CUresult graph_check_free_node_locked(Graph* g, CUdeviceptr dptr);
void graph_add_free_node_locked(GraphNode* node, CUdeviceptr dptr);
// A new executable graph of `g`; of a graph with memory nodes, refused while another one exists.
CUresult graph_memory_instantiate_locked(Graph* g, GraphExec* exec);
// Physical memory for the executable graph's allocations (upload, first launch), and the bookkeeping
// of one launch in API order (which allocations it leaves live); nothing changes on an error.
CUresult graph_memory_upload_locked(GraphExec* exec);
CUresult graph_memory_launch_locked(GraphExec* exec, Context* ctx);
void graph_memory_exec_destroyed_locked(GraphExec* exec);  // when the object is deleted
void graph_memory_graph_destroyed_locked(Graph* g);

}  // namespace simgpu
