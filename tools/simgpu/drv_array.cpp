// CUDA arrays, 3D arrays and mipmapped arrays. Each is charged its size as cuArrayGetMemoryRequirements
// reports it: rows padded to 512 bytes, times height and depth (and summed over mip levels).
// As on the driver, cuArrayGetMemoryRequirements answers only for an array created with
// CUDA_ARRAY3D_DEFERRED_MAPPING, and such an array has no memory (and no charge) of its own: its
// memory comes from a later cuMemMapArrayAsync. So the size an ordinary array is charged is what
// the requirements of a deferred-mapping array of the same description say.
#include <unordered_set>

#include "driver.h"

namespace simgpu {

struct SimArray {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  int device = 0;
  std::uint64_t bytes = 0;  // its size; charged unless it is a deferred-mapping array
  void* memory = nullptr;
  bool level_of_mipmap = false;
  Context* ctx = nullptr;  // destroyed with it
};

struct SimMipmappedArray {
  int device = 0;
  std::vector<SimArray*> levels;
  std::uint64_t bytes = 0;
  bool deferred = false;  // CUDA_ARRAY3D_DEFERRED_MAPPING
  Context* ctx = nullptr;
};

namespace {

// Every live array and mipmapped array, so that a context's go with it (guarded by driver().mu).
std::unordered_set<SimArray*> g_arrays;
std::unordered_set<SimMipmappedArray*> g_mipmaps;

bool deferred_mapping(const CUDA_ARRAY3D_DESCRIPTOR& d) { return (d.Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) != 0; }

std::uint64_t charge_of(const SimArray* a) { return deferred_mapping(a->desc) ? 0 : a->bytes; }

std::uint64_t format_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

std::uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  const std::uint64_t elem = format_bytes(d.Format) * d.NumChannels;
  const std::uint64_t row = (d.Width * elem + 511) / 512 * 512;
  return row * std::max<std::size_t>(d.Height, 1) * std::max<std::size_t>(d.Depth, 1);
}

bool valid_descriptor(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (d.Width == 0 || format_bytes(d.Format) == 0) return false;
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4) return false;
  if (d.Height == 0 && d.Depth != 0) return false;
  return d.Width <= 131072 && d.Height <= 65536 && d.Depth <= 16384;
}

CUresult create_array(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (CUresult r = unsafe_call_check("cuArrayCreate")) return r;
  if (!out || !valid_descriptor(d)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  const std::uint64_t bytes = array_bytes(d);
  const std::uint64_t charge = deferred_mapping(d) ? 0 : bytes;
  if (charge && !charge_device(c->device, charge)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* mem = map_host_memory(bytes);
  if (!mem) {
    if (charge) uncharge_device(c->device, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* a = new SimArray{d, c->device, bytes, mem, false, c};
  add_live_locked(a);
  g_arrays.insert(a);
  *out = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}

void free_array_locked(SimArray* a) {
  if (const std::uint64_t charge = charge_of(a)) uncharge_device(a->device, charge);
  unmap_host_memory(a->memory, a->bytes);
  remove_live_locked(a);
  g_arrays.erase(a);
  delete a;
}

void free_mipmap_locked(SimMipmappedArray* m) {
  for (SimArray* l : m->levels) free_array_locked(l);
  remove_live_locked(m);
  g_mipmaps.erase(m);
  delete m;
}

SimArray* live_array_locked(CUarray h) {
  auto* a = reinterpret_cast<SimArray*>(h);
  return is_live_locked(a) ? a : nullptr;
}

}  // namespace

// A context's arrays are destroyed with it, and their memory returned, as the driver does.
void destroy_context_arrays_locked(Context* c) {
  for (SimMipmappedArray* m : std::vector<SimMipmappedArray*>(g_mipmaps.begin(), g_mipmaps.end()))
    if (m->ctx == c) free_mipmap_locked(m);
  for (SimArray* a : std::vector<SimArray*>(g_arrays.begin(), g_arrays.end()))
    if (a->ctx == c && !a->level_of_mipmap) free_array_locked(a);
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuArrayCreate_v2(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = d->Width;
  d3.Height = d->Height;
  d3.Format = d->Format;
  d3.NumChannels = d->NumChannels;
  return create_array(out, d3);
}

CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  return create_array(out, *d);
}

CUresult cuArrayDestroy(CUarray h) {
  if (CUresult r = ensure_initialized()) return r;
  if (CUresult r = unsafe_call_check("cuArrayDestroy")) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  SimArray* a = live_array_locked(h);
  if (!a || a->level_of_mipmap) return CUDA_ERROR_INVALID_HANDLE;
  free_array_locked(a);
  return CUDA_SUCCESS;
}

CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* out, CUarray h) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  SimArray* a = live_array_locked(h);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  out->Width = a->desc.Width;
  out->Height = a->desc.Height;
  out->Format = a->desc.Format;
  out->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* out, CUarray h) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  SimArray* a = live_array_locked(h);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  *out = a->desc;
  return CUDA_SUCCESS;
}

CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUarray h, CUdevice dev) {
  if (!req) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  std::lock_guard<std::mutex> lk(driver().mu);
  SimArray* a = live_array_locked(h);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  if (!deferred_mapping(a->desc)) return CUDA_ERROR_INVALID_VALUE;  // only for deferred mapping
  *req = CUDA_ARRAY_MEMORY_REQUIREMENTS{};
  req->size = a->bytes;
  req->alignment = 512;
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned int levels) {
  if (!out || !d || levels == 0 || levels > 16 || !valid_descriptor(*d)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  auto* m = new SimMipmappedArray();
  m->device = c->device;
  m->deferred = deferred_mapping(*d);
  m->ctx = c;
  CUDA_ARRAY3D_DESCRIPTOR level = *d;
  for (unsigned i = 0; i < levels; ++i) {
    CUarray a = nullptr;
    if (CUresult r = create_array(&a, level)) {
      std::lock_guard<std::mutex> lk(driver().mu);
      for (SimArray* l : m->levels) free_array_locked(l);
      delete m;
      return r;
    }
    auto* sa = reinterpret_cast<SimArray*>(a);
    sa->level_of_mipmap = true;
    m->levels.push_back(sa);
    m->bytes += sa->bytes;
    level.Width = std::max<std::size_t>(level.Width / 2, 1);
    if (level.Height) level.Height = std::max<std::size_t>(level.Height / 2, 1);
    // A layered or cube-map mipmap keeps its layers at every level; a 3D one halves its depth.
    if (level.Depth && !(d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)))
      level.Depth = std::max<std::size_t>(level.Depth / 2, 1);
  }
  std::lock_guard<std::mutex> lk(driver().mu);
  add_live_locked(m);
  g_mipmaps.insert(m);
  *out = reinterpret_cast<CUmipmappedArray>(m);
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray h, unsigned int level) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* m = reinterpret_cast<SimMipmappedArray*>(h);
  if (!is_live_locked(m)) return CUDA_ERROR_INVALID_HANDLE;
  if (level >= m->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUarray>(m->levels[level]);
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUmipmappedArray h, CUdevice dev) {
  if (!req) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* m = reinterpret_cast<SimMipmappedArray*>(h);
  if (!is_live_locked(m)) return CUDA_ERROR_INVALID_HANDLE;
  if (!m->deferred) return CUDA_ERROR_INVALID_VALUE;  // only for deferred mapping
  *req = CUDA_ARRAY_MEMORY_REQUIREMENTS{};
  req->size = m->bytes;
  req->alignment = 512;
  return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* m = reinterpret_cast<SimMipmappedArray*>(h);
  if (!is_live_locked(m)) return CUDA_ERROR_INVALID_HANDLE;
  free_mipmap_locked(m);
  return CUDA_SUCCESS;
}

}  // extern "C"
