// memcpy and memset families, synchronous, asynchronous and per-thread-default-stream variants.
// Device pointers are host addresses here, so a copy is a memcpy done in stream order.
#include <cstring>

#include "capture.h"

namespace simgpu {
namespace {

// True when [p, p+n) lies inside one allocation of device-visible memory.
bool device_range_ok_locked(CUdeviceptr p, std::size_t n) {
  Allocation* a = find_allocation_locked(static_cast<std::uintptr_t>(p));
  if (!a) return false;
  return static_cast<std::uintptr_t>(p) + n <= a->base + (a->mapped ? a->mapped : a->size);
}

CUresult check_device_ranges(std::initializer_list<std::pair<CUdeviceptr, std::size_t>> ranges) {
  std::lock_guard<std::mutex> lk(driver().mu);
  for (auto& [p, n] : ranges)
    if (!device_range_ok_locked(p, n)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// Runs `work` in stream order; `sync` waits for it (the synchronous API on the stream).
// A capturing stream records an asynchronous copy as a node that copies when the graph runs; a
// synchronous one is a potentially unsafe call (and on the legacy stream, an implicit dependency).
CUresult submit(CUstream hstream, bool per_thread, bool sync, std::function<void()> work) {
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hstream, per_thread, &s)) return r;
  {
    std::lock_guard<std::mutex> lk(driver().mu);
    if (CUresult r = capture_submit_check_locked(s, sync ? "cuMemcpy" : "cuMemcpyAsync")) return r;
    if (sync)
      if (CUresult r = capture_unsafe_check_locked("cuMemcpy")) return r;
    if (s->capture) {
      if (sync) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      capture_node_locked(s, CU_GRAPH_NODE_TYPE_MEMCPY)->work = std::move(work);
      return CUDA_SUCCESS;
    }
    Op op;
    op.kind = Op::Kind::host;
    op.host = std::move(work);
    enqueue_locked(s, std::move(op));
  }
  return sync ? stream_synchronize(s, "cuMemcpy") : CUDA_SUCCESS;
}

CUresult copy(CUdeviceptr dst, CUdeviceptr src, std::size_t n, bool dst_dev, bool src_dev, CUstream st, bool pt,
              bool sync) {
  if (CUresult r = ensure_initialized()) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  if (dst_dev && check_device_ranges({{dst, n}})) return CUDA_ERROR_INVALID_VALUE;
  if (src_dev && check_device_ranges({{src, n}})) return CUDA_ERROR_INVALID_VALUE;
  return submit(st, pt, sync,
                [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
}

template <class T>
CUresult set2d(CUdeviceptr dst, std::size_t pitch, T value, std::size_t width, std::size_t height, CUstream st, bool pt,
               bool sync) {
  if (CUresult r = ensure_initialized()) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (height > 1 && pitch < width * sizeof(T)) return CUDA_ERROR_INVALID_VALUE;
  if (dst % sizeof(T)) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t extent = (height - 1) * pitch + width * sizeof(T);
  if (check_device_ranges({{dst, extent}})) return CUDA_ERROR_INVALID_VALUE;
  return submit(st, pt, sync, [=] {
    for (std::size_t y = 0; y < height; ++y) {
      T* row = reinterpret_cast<T*>(dst + y * pitch);
      for (std::size_t x = 0; x < width; ++x) row[x] = value;
    }
  });
}

// One side of a 2D/3D copy: where its bytes start and how rows and slices are laid out.
struct Side {
  std::uintptr_t base = 0;
  std::size_t pitch = 0;
  std::size_t height = 0;
  bool device = false;
};

CUresult side_of(CUmemorytype type, const void* host, CUdeviceptr dev, CUarray array, std::size_t x_bytes,
                 std::size_t y, std::size_t z, std::size_t pitch, std::size_t height, Side& out) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      out.base = reinterpret_cast<std::uintptr_t>(host);
      break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
      out.base = static_cast<std::uintptr_t>(dev);
      out.device = true;
      break;
    case CU_MEMORYTYPE_ARRAY: {
      (void)array;
      return CUDA_ERROR_NOT_SUPPORTED;  // array copies: see drv_array.cpp
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (!out.base) return CUDA_ERROR_INVALID_VALUE;
  out.pitch = pitch;
  out.height = height;
  out.base += x_bytes + y * pitch + z * pitch * height;
  return CUDA_SUCCESS;
}

CUresult copy3d(Side src, Side dst, std::size_t width, std::size_t height, std::size_t depth, CUstream st, bool pt,
                bool sync) {
  if (CUresult r = ensure_initialized()) return r;
  if (!width || !height || !depth) return CUDA_SUCCESS;
  if ((height > 1 || depth > 1) && (src.pitch < width || dst.pitch < width)) return CUDA_ERROR_INVALID_VALUE;
  auto extent = [&](const Side& s) { return (depth - 1) * s.pitch * s.height + (height - 1) * s.pitch + width; };
  if (src.device && check_device_ranges({{src.base, extent(src)}})) return CUDA_ERROR_INVALID_VALUE;
  if (dst.device && check_device_ranges({{dst.base, extent(dst)}})) return CUDA_ERROR_INVALID_VALUE;
  return submit(st, pt, sync, [=] {
    for (std::size_t z = 0; z < depth; ++z)
      for (std::size_t y = 0; y < height; ++y)
        std::memmove(reinterpret_cast<void*>(dst.base + z * dst.pitch * dst.height + y * dst.pitch),
                     reinterpret_cast<const void*>(src.base + z * src.pitch * src.height + y * src.pitch), width);
  });
}

CUresult copy2d(const CUDA_MEMCPY2D* p, CUstream st, bool pt, bool sync) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  Side s, d;
  if (CUresult r = side_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, 0,
                           p->srcPitch ? p->srcPitch : p->WidthInBytes, 0, s))
    return r;
  if (CUresult r = side_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, 0,
                           p->dstPitch ? p->dstPitch : p->WidthInBytes, 0, d))
    return r;
  return copy3d(s, d, p->WidthInBytes, p->Height, 1, st, pt, sync);
}

CUresult copy3d_desc(const CUDA_MEMCPY3D* p, CUstream st, bool pt, bool sync) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  Side s, d;
  if (CUresult r = side_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, p->srcZ,
                           p->srcPitch ? p->srcPitch : p->WidthInBytes, p->srcHeight ? p->srcHeight : p->Height, s))
    return r;
  if (CUresult r = side_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, p->dstZ,
                           p->dstPitch ? p->dstPitch : p->WidthInBytes, p->dstHeight ? p->dstHeight : p->Height, d))
    return r;
  return copy3d(s, d, p->WidthInBytes, p->Height, p->Depth, st, pt, sync);
}

}  // namespace
}  // namespace simgpu

using namespace simgpu;

// The synchronous copies run on the legacy NULL stream (or the per-thread stream for _ptds).
#define SIM_COPY_FAMILY(SUFFIX, PT)                                                                        \
  CUresult cuMemcpy##SUFFIX(CUdeviceptr d, CUdeviceptr s, size_t n) {                                      \
    return copy(d, s, n, true, true, nullptr, PT, true);                                                   \
  }                                                                                                        \
  CUresult cuMemcpyHtoD_v2##SUFFIX(CUdeviceptr d, const void* s, size_t n) {                               \
    return copy(d, reinterpret_cast<CUdeviceptr>(s), n, true, false, nullptr, PT, true);                   \
  }                                                                                                        \
  CUresult cuMemcpyDtoH_v2##SUFFIX(void* d, CUdeviceptr s, size_t n) {                                     \
    return copy(reinterpret_cast<CUdeviceptr>(d), s, n, false, true, nullptr, PT, true);                   \
  }                                                                                                        \
  CUresult cuMemcpyDtoD_v2##SUFFIX(CUdeviceptr d, CUdeviceptr s, size_t n) {                               \
    return copy(d, s, n, true, true, nullptr, PT, true);                                                   \
  }                                                                                                        \
  CUresult cuMemcpyPeer##SUFFIX(CUdeviceptr d, CUcontext, CUdeviceptr s, CUcontext, size_t n) {            \
    return copy(d, s, n, true, true, nullptr, PT, true);                                                   \
  }                                                                                                        \
  CUresult cuMemcpy2D_v2##SUFFIX(const CUDA_MEMCPY2D* p) { return copy2d(p, nullptr, PT, true); }          \
  CUresult cuMemcpy2DUnaligned_v2##SUFFIX(const CUDA_MEMCPY2D* p) { return copy2d(p, nullptr, PT, true); } \
  CUresult cuMemcpy3D_v2##SUFFIX(const CUDA_MEMCPY3D* p) { return copy3d_desc(p, nullptr, PT, true); }     \
  CUresult cuMemsetD8_v2##SUFFIX(CUdeviceptr d, unsigned char v, size_t n) {                               \
    return set2d<unsigned char>(d, n, v, n, 1, nullptr, PT, true);                                         \
  }                                                                                                        \
  CUresult cuMemsetD16_v2##SUFFIX(CUdeviceptr d, unsigned short v, size_t n) {                             \
    return set2d<unsigned short>(d, n * 2, v, n, 1, nullptr, PT, true);                                    \
  }                                                                                                        \
  CUresult cuMemsetD32_v2##SUFFIX(CUdeviceptr d, unsigned int v, size_t n) {                               \
    return set2d<unsigned int>(d, n * 4, v, n, 1, nullptr, PT, true);                                      \
  }                                                                                                        \
  CUresult cuMemsetD2D8_v2##SUFFIX(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) {         \
    return set2d<unsigned char>(d, p, v, w, h, nullptr, PT, true);                                         \
  }                                                                                                        \
  CUresult cuMemsetD2D16_v2##SUFFIX(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) {       \
    return set2d<unsigned short>(d, p, v, w, h, nullptr, PT, true);                                        \
  }                                                                                                        \
  CUresult cuMemsetD2D32_v2##SUFFIX(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) {         \
    return set2d<unsigned int>(d, p, v, w, h, nullptr, PT, true);                                          \
  }

#define SIM_ASYNC_FAMILY(SUFFIX, PT)                                                                                 \
  CUresult cuMemcpyAsync##SUFFIX(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {                              \
    return copy(d, s, n, true, true, st, PT, false);                                                                 \
  }                                                                                                                  \
  CUresult cuMemcpyHtoDAsync_v2##SUFFIX(CUdeviceptr d, const void* s, size_t n, CUstream st) {                       \
    return copy(d, reinterpret_cast<CUdeviceptr>(s), n, true, false, st, PT, false);                                 \
  }                                                                                                                  \
  CUresult cuMemcpyDtoHAsync_v2##SUFFIX(void* d, CUdeviceptr s, size_t n, CUstream st) {                             \
    return copy(reinterpret_cast<CUdeviceptr>(d), s, n, false, true, st, PT, false);                                 \
  }                                                                                                                  \
  CUresult cuMemcpyDtoDAsync_v2##SUFFIX(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {                       \
    return copy(d, s, n, true, true, st, PT, false);                                                                 \
  }                                                                                                                  \
  CUresult cuMemcpyPeerAsync##SUFFIX(CUdeviceptr d, CUcontext, CUdeviceptr s, CUcontext, size_t n, CUstream st) {    \
    return copy(d, s, n, true, true, st, PT, false);                                                                 \
  }                                                                                                                  \
  CUresult cuMemcpy2DAsync_v2##SUFFIX(const CUDA_MEMCPY2D* p, CUstream st) { return copy2d(p, st, PT, false); }      \
  CUresult cuMemcpy3DAsync_v2##SUFFIX(const CUDA_MEMCPY3D* p, CUstream st) { return copy3d_desc(p, st, PT, false); } \
  CUresult cuMemsetD8Async##SUFFIX(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {                          \
    return set2d<unsigned char>(d, n, v, n, 1, st, PT, false);                                                       \
  }                                                                                                                  \
  CUresult cuMemsetD16Async##SUFFIX(CUdeviceptr d, unsigned short v, size_t n, CUstream st) {                        \
    return set2d<unsigned short>(d, n * 2, v, n, 1, st, PT, false);                                                  \
  }                                                                                                                  \
  CUresult cuMemsetD32Async##SUFFIX(CUdeviceptr d, unsigned int v, size_t n, CUstream st) {                          \
    return set2d<unsigned int>(d, n * 4, v, n, 1, st, PT, false);                                                    \
  }                                                                                                                  \
  CUresult cuMemsetD2D8Async##SUFFIX(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream st) {    \
    return set2d<unsigned char>(d, p, v, w, h, st, PT, false);                                                       \
  }                                                                                                                  \
  CUresult cuMemsetD2D16Async##SUFFIX(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream st) {  \
    return set2d<unsigned short>(d, p, v, w, h, st, PT, false);                                                      \
  }                                                                                                                  \
  CUresult cuMemsetD2D32Async##SUFFIX(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream st) {    \
    return set2d<unsigned int>(d, p, v, w, h, st, PT, false);                                                        \
  }

extern "C" {
SIM_COPY_FAMILY(, false)
SIM_COPY_FAMILY(_ptds, true)
SIM_ASYNC_FAMILY(, false)
SIM_ASYNC_FAMILY(_ptsz, true)
}
