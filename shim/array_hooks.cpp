// CUDA arrays, 3D (layered, cube map) arrays and mipmapped arrays. The driver does not say what an
// ordinary array takes (cuArrayGetMemoryRequirements answers only for deferred-mapping arrays), so
// the charge is computed from the descriptor: rows padded to 512 bytes (block-compressed formats by
// 4x4 blocks), times height and depth or layers, summed over mip levels. Deferred-mapping and
// sparse arrays take no memory until cuMemMapArrayAsync maps a cuMemCreate allocation into them,
// and that allocation is charged already.
#include <algorithm>

#include "hook_support.h"

namespace slice::shim {
namespace {

constexpr std::uint64_t kRowAlignment = 512;

std::uint64_t element_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit formats, and a safe guess for packed and video ones
  }
}

// Block-compressed formats store 4x4 texels in 8 bytes (BC1, BC4) or 16 (the others).
std::uint64_t block_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_BC1_UNORM:
    case CU_AD_FORMAT_BC1_UNORM_SRGB:
    case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
      return 8;
    case CU_AD_FORMAT_BC2_UNORM:
    case CU_AD_FORMAT_BC2_UNORM_SRGB:
    case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB:
    case CU_AD_FORMAT_BC5_UNORM:
    case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16:
    case CU_AD_FORMAT_BC6H_SF16:
    case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
      return 16;
    default:
      return 0;
  }
}

std::uint64_t array_bytes(std::uint64_t width, std::uint64_t height, std::uint64_t depth, CUarray_format format,
                          unsigned channels) {
  std::uint64_t row_bytes = width * element_bytes(format) * channels, rows = std::max<std::uint64_t>(height, 1);
  if (const std::uint64_t block = block_bytes(format)) {
    row_bytes = (width + 3) / 4 * block;
    rows = (rows + 3) / 4;
  }
  const std::uint64_t row = (row_bytes + kRowAlignment - 1) / kRowAlignment * kRowAlignment;
  return row * rows * std::max<std::uint64_t>(depth, 1);
}

// No memory of their own: deferred-mapping and sparse arrays get theirs from cuMemCreate
// allocations mapped into them, which are charged already.
bool backed_elsewhere(unsigned flags) { return (flags & (CUDA_ARRAY3D_DEFERRED_MAPPING | CUDA_ARRAY3D_SPARSE)) != 0; }

std::uint64_t descriptor_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (backed_elsewhere(d.Flags)) return 0;
  return array_bytes(d.Width, d.Height, d.Depth, d.Format, d.NumChannels);
}

std::uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  if (backed_elsewhere(d.Flags)) return 0;
  // Layers (and a cube map's faces) are not halved from level to level; a 3D array's depth is.
  const bool layers = (d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  std::uint64_t w = d.Width, h = d.Height, z = d.Depth, total = 0;
  for (unsigned i = 0; i < std::min(levels, 32u); ++i) {  // the driver refuses more; never loop long
    total += array_bytes(w, h, z, d.Format, d.NumChannels);
    w = std::max<std::uint64_t>(w / 2, 1);
    if (h) h = std::max<std::uint64_t>(h / 2, 1);
    if (z && !layers) z = std::max<std::uint64_t>(z / 2, 1);
  }
  return total;
}

template <typename Handle, typename Call>
CUresult create(std::uint64_t bytes, Handle* out, const char* what, Call&& call) {
  return accounted(
      [&](Session& s) {
        const CurrentContext ctx = current_context(s);
        if (ctx.device < 0 || bytes == 0) return call();
        const CUresult rc = charge_around(s, ctx.device, bytes, what, call);
        if (rc == CUDA_SUCCESS)
          record(s, s.arrays, reinterpret_cast<std::uint64_t>(*out), Charge{ctx.device, bytes, ctx.key});
        return rc;
      },
      call);
}

template <typename Call>
CUresult destroy(std::uint64_t key, Call&& call) {
  return accounted([&](Session& s) { return free_recorded(s, s.arrays, key, call); }, call);
}

}  // namespace
}  // namespace slice::shim

using namespace slice::shim;

SLICE_HOOK_BODY(CUresult, cuArrayCreate_v2)(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* d) {
  const std::uint64_t bytes = d != nullptr ? array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels) : 0;
  return create(bytes, pHandle, "cuArrayCreate", [&] { return SLICE_CALL_REAL(cuArrayCreate_v2, pHandle, d); });
}

SLICE_HOOK_BODY(CUresult, cuArrayCreate)(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR_v1* d) {
  const std::uint64_t bytes = d != nullptr ? array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels) : 0;
  return create(bytes, pHandle, "cuArrayCreate", [&] { return SLICE_CALL_REAL(cuArrayCreate, pHandle, d); });
}

SLICE_HOOK_BODY(CUresult, cuArray3DCreate_v2)(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  const std::uint64_t bytes = d != nullptr ? descriptor_bytes(*d) : 0;
  return create(bytes, pHandle, "cuArray3DCreate", [&] { return SLICE_CALL_REAL(cuArray3DCreate_v2, pHandle, d); });
}

SLICE_HOOK_BODY(CUresult, cuArray3DCreate)(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* d) {
  const std::uint64_t bytes = d != nullptr && !backed_elsewhere(d->Flags)
                                  ? array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels)
                                  : 0;
  return create(bytes, pHandle, "cuArray3DCreate", [&] { return SLICE_CALL_REAL(cuArray3DCreate, pHandle, d); });
}

SLICE_HOOK_BODY(CUresult, cuArrayDestroy)(CUarray hArray) {
  return destroy(reinterpret_cast<std::uint64_t>(hArray), [&] { return SLICE_CALL_REAL(cuArrayDestroy, hArray); });
}

SLICE_HOOK_BODY(CUresult, cuMipmappedArrayCreate)
(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned int numMipmapLevels) {
  const std::uint64_t bytes = d != nullptr ? mipmap_bytes(*d, numMipmapLevels) : 0;
  return create(bytes, pHandle, "cuMipmappedArrayCreate",
                [&] { return SLICE_CALL_REAL(cuMipmappedArrayCreate, pHandle, d, numMipmapLevels); });
}

SLICE_HOOK_BODY(CUresult, cuMipmappedArrayDestroy)(CUmipmappedArray hMipmappedArray) {
  return destroy(reinterpret_cast<std::uint64_t>(hMipmappedArray),
                 [&] { return SLICE_CALL_REAL(cuMipmappedArrayDestroy, hMipmappedArray); });
}
