// Parses the code images the CUDA driver API accepts (cuModuleLoadData, cuModuleLoadFatBinary,
// cuLibraryLoadData, cuModuleLoad) into what the simulated driver needs: the kernels (entry
// functions) with their parameter sizes, and the module-scope variables cuModuleGetGlobal finds.
// Kernels never execute in the simulator, so nothing about the code itself is decoded.
//
// Accepted images (detected from their first bytes):
//   * PTX text (NUL-terminated; it must start, after comments, with `.version`);
//   * a cubin: a 64-bit little-endian ELF with e_machine EM_CUDA (190);
//   * a fatbin container (magic 0xBA55ED50) holding PTX and cubin entries, possibly compressed
//     (LZ4 block format, flag 0x2000; Zstandard frames, flag 0x8000: decoded with liblz4 and
//     libzstd, which only the simulator links);
//   * the __fatBinC_Wrapper_t struct host code embeds (magic 0x466243B1) pointing at a fatbin.
//
// No CUDA headers are needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace simgpu {

struct KernelInfo {
  std::string name;  // exactly as in the image (C++ kernels keep their mangled name)
  // True when the image says how many parameters there are and how big each is: always for
  // PTX; for a cubin when its .nv.info.<kernel> section lists them.
  bool params_known = false;
  std::vector<std::uint32_t> param_sizes;    // bytes, in declaration order
  std::vector<std::uint32_t> param_offsets;  // byte offset of each parameter in the parameter buffer
};

struct GlobalInfo {
  std::string name;      // a __device__, __constant__ or __managed__ variable
  std::size_t size = 0;  // bytes
};

struct ModuleImage {
  enum class Kind { ptx, cubin, fatbin };
  Kind kind = Kind::ptx;       // what the image given to parse_module_image was
  int arch = 0;                // SM of the code used, e.g. 89 (for a fatbin: of the entry picked)
  Kind code_kind = Kind::ptx;  // ptx or cubin: the code the kernels come from (for a fatbin: the
                               // kind of the entry picked; ptx means the driver would JIT it)
  std::vector<KernelInfo> kernels;
  std::vector<GlobalInfo> globals;
};

enum class ImageStatus {
  ok,
  invalid_image,            // not an image, truncated, or inconsistent (CUDA_ERROR_INVALID_IMAGE)
  invalid_ptx,              // starts like PTX but does not parse (CUDA_ERROR_INVALID_PTX)
  no_binary_for_gpu,        // nothing in it runs on the device (CUDA_ERROR_NO_BINARY_FOR_GPU)
  unsupported_compression,  // a compressed fatbin entry this parser cannot decode (a Zstandard
                            // frame that needs a dictionary)
};

// Parses the image at `data`.
//
// size != 0: the image is at most `size` bytes and nothing past them is read. PTX must then have
// its NUL terminator within those bytes (cuModuleLoad from a file: append one). For the wrapper
// struct, `size` covers the struct only; the fatbin it points to is read with its size unknown.
// size == 0: the size is not known (cuModuleLoadData): it is derived from the format's own headers
// (ELF header tables, fatbin header sizes, PTX's NUL) and nothing beyond what they say is read.
//
// (cc_major, cc_minor) is the device's compute capability. A cubin for sm_XY runs when X == major
// and Y <= minor; PTX for compute_XY can be JIT-compiled when XY <= the device's. Arch-specific
// code (sm_90a) runs only on exactly that SM, family code (sm_100f) only on the same major; that
// is known from fatbin entry flags and the PTX .target, not for a lone cubin (its ELF header does
// not show it; CUDA 13 records it in a .nv.compat section, which is not read).
// From a fatbin the best fitting cubin is picked (highest SM), else the highest fitting PTX. A lone
// cubin or PTX image that cannot run on the device also gives no_binary_for_gpu. cc_major <= 0
// turns the check off (a fatbin then yields its highest cubin, else its highest PTX).
//
// On any status but ok, `out` is left empty. Never throws; hostile input gives invalid_image.
ImageStatus parse_module_image(const void* data, std::size_t size, int cc_major, int cc_minor, ModuleImage& out);

const char* image_status_name(ImageStatus status);

}  // namespace simgpu
