// The CUDA runtime under libslice on a real GPU: cudaMemGetInfo shows the cap, cudaMalloc is
// refused at it (never past it), and a kernel still launches and runs. Run with
// LD_PRELOAD=libslice.so and SLICE_MEMORY_LIMIT=<cap bytes>; the cap is passed as argv[1] too.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void add_one(int* p) { p[threadIdx.x] += 1; }

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const unsigned long long cap = std::strtoull(argv[1], nullptr, 10);
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return std::puts("cudaMemGetInfo failed"), 1;
  std::printf("cudaMemGetInfo: free %zu total %zu (cap %llu)\n", free_bytes, total, cap);
  if (total != cap || free_bytes > cap) return std::puts("FAIL: the runtime does not see the cap"), 1;
  const size_t block = 256ull << 20;
  std::vector<void*> blocks;
  for (;;) {
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, block);
    if (rc == cudaErrorMemoryAllocation) break;
    if (rc != cudaSuccess) return std::printf("FAIL: cudaMalloc: %s\n", cudaGetErrorString(rc)), 1;
    blocks.push_back(p);
    if (blocks.size() * block > cap) return std::puts("FAIL: allocated past the cap"), 1;
  }
  cudaGetLastError();  // clear the refusal
  std::printf("cudaMalloc: %zu blocks of 256 MiB before the refusal\n", blocks.size());
  if ((blocks.size() + 1) * block + (cap - free_bytes) <= cap)
    return std::puts("FAIL: refused although a block still fitted"), 1;
  cudaMemGetInfo(&free_bytes, &total);
  std::printf("after filling: free %zu total %zu\n", free_bytes, total);
  if (free_bytes >= block) return std::puts("FAIL: free memory reported after the refusal"), 1;
  int* d = static_cast<int*>(blocks[0]);
  cudaMemset(d, 0, 32 * sizeof(int));
  add_one<<<1, 32>>>(d);
  int h[32] = {};
  if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess || h[31] != 1)
    return std::puts("FAIL: the kernel did not run"), 1;
  for (void* p : blocks) cudaFree(p);
  cudaMemGetInfo(&free_bytes, &total);
  std::printf("after freeing: free %zu\n", free_bytes);
  std::puts("PASS");
  return 0;
}
