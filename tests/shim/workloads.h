// Framework-shaped workloads on the driver API, written from the frameworks' documented behaviour
// (not their code), for tests/shim/workloads_test.cpp: each runs the same way with and without
// libslice and prints what it did as "key=value" lines.
//   caching-allocator   PyTorch's caching allocator: large segments split into blocks and reused,
//                       growing batches until out of memory, then releasing the cache and going on
//                       (empty_cache); with EXPANDABLE=1 the segments are one virtual range that grows
//                       by mapped 2 MiB chunks (expandable_segments:True)
//   vllm                vLLM's start-up: memory profiled with cuMemGetInfo, a KV cache of 90% of the
//                       reported total (less what is in use) in mapped chunks, decode graphs captured
//                       for several batch sizes on two threads and replayed, then sleep mode (the KV
//                       cache unmapped and released) and waking (mapped again)
//   async-pools         PyTorch's cudaMallocAsync backend: the default pool keeping everything
//                       (release threshold UINT64_MAX), allocations on two streams, a captured graph
//                       with allocation nodes, trims, filling to out of memory and recovering
//   nccl-vmm            NCCL's buffers: a cuMemCreate allocation with a POSIX file-descriptor handle,
//                       exported to a second process that maps it, writes it and exits
//   stream-per-request  a server that makes and destroys a stream for each request
#pragma once

#include <string>

namespace slice_test {

// Runs one workload; 0 when it completed (its findings are printed either way).
int run_workload(const std::string& name);

}  // namespace slice_test
