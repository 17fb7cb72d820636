// Sample kernels for the simulated driver's module-image tests (tests/unit/module_image_test.cpp).
// They are only compiled (never executed by the simulator); the test checks that the names,
// parameter sizes and globals the image parser reports match what is declared here.

// Globals the tests look up through cuModuleGetGlobal: 4 * sizeof(int) = 16 bytes, and a
// __constant__ one (8 * sizeof(float) = 32 bytes), which lives in a different ELF section.
__device__ int counter[4];
__constant__ float coeffs[8];

// Busy-waits for roughly `ns` nanoseconds of GPU time (one 8-byte parameter).
extern "C" __global__ void spin(unsigned long long ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (now - start < ns) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(&counter[0], 1);
}

// Does nothing: a kernel without parameters.
extern "C" __global__ void noop() {}

// A 24-byte by-value argument (three 8-byte fields, 8-byte aligned).
struct Triple {
  double a;
  long long b;
  const float* c;
};

// A C++ (mangled) templated kernel whose parameters differ in size: 8 (pointer), 4 (int), 24 (struct).
template <typename T>
__global__ void scale(T* out, int n, Triple t) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<T>(t.a * static_cast<double>(t.b) * coeffs[i & 7] + t.c[i]);
  if (i == 0) atomicAdd(&counter[1], n);
}

// Explicit instantiation so the kernel is emitted: _Z5scaleIfEvPT_i6Triple.
template __global__ void scale<float>(float*, int, Triple);
