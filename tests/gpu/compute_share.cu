// Keeps the GPU busy with spin kernels of a given length for a given time, plainly or as CUDA graphs
// (ten kernels per graph), and prints how many kernels completed: two of these under libslice with
// different SLICE_COMPUTE_SHARE values split the device in the ratio of their counts.
// Usage: compute_share SECONDS KERNEL_US [graph]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const double seconds = std::atof(argv[1]);
  const double kernel_us = std::atof(argv[2]);
  const bool graph = argc > 3 && std::strcmp(argv[3], "graph") == 0;
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const long long cycles = static_cast<long long>(kernel_us * clock_khz / 1000.0);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaGraphExec_t exec = nullptr;
  const int per_graph = 10;
  if (graph) {
    cudaGraph_t g;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    for (int i = 0; i < per_graph; ++i) spin<<<1, 1, 0, stream>>>(cycles);
    cudaStreamEndCapture(stream, &g);
    if (cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) return std::puts("graph instantiation failed"), 1;
  }
  long long kernels = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (int batch = 0; batch < 4; ++batch) {
      if (graph) {
        cudaGraphLaunch(exec, stream);
        kernels += per_graph;
      } else {
        spin<<<1, 1, 0, stream>>>(cycles);
        kernels += 1;
      }
    }
    cudaStreamSynchronize(stream);
  }
  if (cudaGetLastError() != cudaSuccess) return std::puts("a launch failed"), 1;
  std::printf("kernels %lld\n", kernels);
  return 0;
}
