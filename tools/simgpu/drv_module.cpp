// Modules and libraries loaded from what nvcc makes (PTX, cubin, fatbin), functions and globals.
// Kernels never run their code: a kernel whose name contains "spin" takes its first parameter in
// nanoseconds of device time, any other kernel 10 microseconds.
#include <cstring>
#include <fstream>
#include <iterator>

#include "driver.h"

namespace simgpu {
namespace {

CUresult image_error(ImageStatus s) {
  switch (s) {
    case ImageStatus::ok:
      return CUDA_SUCCESS;
    case ImageStatus::invalid_ptx:
      return CUDA_ERROR_INVALID_PTX;
    case ImageStatus::no_binary_for_gpu:
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    default:
      return CUDA_ERROR_INVALID_IMAGE;
  }
}

CUresult build_module(const void* data, std::size_t size, Context* ctx, bool from_library, Module** out) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  auto m = std::make_unique<Module>();
  if (CUresult r = image_error(parse_module_image(data, size, kComputeMajor, kComputeMinor, m->image))) return r;
  m->ctx = ctx;
  m->from_library = from_library;
  for (const KernelInfo& k : m->image.kernels) {
    auto f = std::make_unique<Function>();
    f->name = k.name;
    f->info = k;
    f->spin = k.name.find("spin") != std::string::npos;
    f->module = m.get();
    m->functions.push_back(std::move(f));
  }
  // Globals live in ordinary host memory standing for device memory. What they take is charged to
  // the context's device in whole chunks, as memory the process holds that no allocation call made
  // (NVML's per-process figure includes it).
  std::uint64_t global_bytes = 0;
  for (const GlobalInfo& gl : m->image.globals) {
    void* p = map_host_memory(gl.size ? gl.size : 1);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    std::memset(p, 0, gl.size ? gl.size : 1);  // initial values are not simulated: globals start at zero
    m->globals[gl.name] = {reinterpret_cast<CUdeviceptr>(p), gl.size};
    global_bytes += gl.size;
  }
  if (ctx && global_bytes) {
    const std::uint64_t charge = (global_bytes + kMemoryGranularity - 1) / kMemoryGranularity * kMemoryGranularity;
    if (!charge_device(ctx->device, charge)) {
      for (auto& [name, gv] : m->globals)
        unmap_host_memory(reinterpret_cast<void*>(gv.first), gv.second ? gv.second : 1);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->charged = charge;
  }
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  for (auto& f : m->functions) add_live_locked(f.get());
  for (auto& [name, gv] : m->globals) {
    record_allocation_locked(static_cast<std::uintptr_t>(gv.first), gv.second, gv.second ? gv.second : 1,
                             MemKind::global, ctx, ctx ? ctx->device : 0);
  }
  add_live_locked(m.get());
  *out = m.release();
  return CUDA_SUCCESS;
}

void unload_module_locked(Module* m) {
  Driver& g = driver();
  for (auto& f : m->functions) remove_live_locked(f.get());
  for (auto& [name, gv] : m->globals) {
    g.allocations.erase(static_cast<std::uintptr_t>(gv.first));
    unmap_host_memory(reinterpret_cast<void*>(gv.first), gv.second ? gv.second : 1);
  }
  if (m->charged) uncharge_device(m->ctx->device, m->charged);
  remove_live_locked(m);
  delete m;
}

bool read_file(const char* path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  out.push_back('\0');  // PTX is text: keep it terminated
  return true;
}

CUresult load_into_context(CUmodule* out, const void* data, std::size_t size) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  Module* m = nullptr;
  if (CUresult r = build_module(data, size, c, false, &m)) return r;
  *out = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

Module* live_module_locked(const void* h) {
  auto* m = reinterpret_cast<Module*>(const_cast<void*>(h));
  return is_live_locked(m) ? m : nullptr;
}

Function* find_function_locked(Module* m, const char* name) {
  for (auto& f : m->functions)
    if (f->name == name) return f.get();
  return nullptr;
}

}  // namespace

void destroy_context_modules_locked(Context* c) {
  std::vector<Module*> owned;
  for (const auto& [handle, kind] : driver().live)
    if (kind == HandleKind::module) {
      auto* m = static_cast<Module*>(const_cast<void*>(handle));
      if (m->ctx == c && !m->from_library) owned.push_back(m);
    }
  for (Module* m : owned) unload_module_locked(m);
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuModuleLoadData(CUmodule* module, const void* image) { return load_into_context(module, image, 0); }

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return load_into_context(module, image, 0);
}

CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fatbin) { return load_into_context(module, fatbin, 0); }

CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  if (CUresult r = ensure_initialized()) return r;
  if (!fname) return CUDA_ERROR_INVALID_VALUE;
  std::string bytes;
  if (!read_file(fname, bytes)) return CUDA_ERROR_FILE_NOT_FOUND;
  return load_into_context(module, bytes.data(), bytes.size());
}

CUresult cuModuleUnload(CUmodule hmod) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(hmod);
  if (!m || m->from_library) return CUDA_ERROR_INVALID_HANDLE;
  unload_module_locked(m);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (CUresult r = ensure_initialized()) return r;
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  Function* f = find_function_locked(m, name);
  if (!f) return CUDA_ERROR_NOT_FOUND;
  *hfunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule hmod) {
  if (CUresult r = ensure_initialized()) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(m->functions.size());
  return CUDA_SUCCESS;
}

CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int n, CUmodule hmod) {
  if (CUresult r = ensure_initialized()) return r;
  if (!functions) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  for (unsigned i = 0; i < n && i < m->functions.size(); ++i)
    functions[i] = reinterpret_cast<CUfunction>(m->functions[i].get());
  return CUDA_SUCCESS;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  if (CUresult r = ensure_initialized()) return r;
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(hmod);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->globals.find(name);
  if (it == m->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = it->second.first;
  if (bytes) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_EAGER_LOADING;
  return CUDA_SUCCESS;
}

// --- libraries: context-independent modules; a CUkernel is the library's Function ---

CUresult cuLibraryLoadData(CUlibrary* lib, const void* code, CUjit_option*, void**, unsigned int, CUlibraryOption*,
                           void**, unsigned int) {
  if (CUresult r = ensure_initialized()) return r;
  if (!lib || !code) return CUDA_ERROR_INVALID_VALUE;
  Module* m = nullptr;
  if (CUresult r = build_module(code, 0, nullptr, true, &m)) return r;
  *lib = reinterpret_cast<CUlibrary>(m);
  return CUDA_SUCCESS;
}

CUresult cuLibraryLoadFromFile(CUlibrary* lib, const char* fname, CUjit_option* jo, void** jv, unsigned int jn,
                               CUlibraryOption* lo, void** lv, unsigned int ln) {
  if (CUresult r = ensure_initialized()) return r;
  if (!fname) return CUDA_ERROR_INVALID_VALUE;
  std::string bytes;
  if (!read_file(fname, bytes)) return CUDA_ERROR_FILE_NOT_FOUND;
  return cuLibraryLoadData(lib, bytes.data(), jo, jv, jn, lo, lv, ln);
}

CUresult cuLibraryUnload(CUlibrary lib) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(lib);
  if (!m || !m->from_library) return CUDA_ERROR_INVALID_HANDLE;
  unload_module_locked(m);
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary lib, const char* name) {
  if (CUresult r = ensure_initialized()) return r;
  if (!kernel || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(lib);
  if (!m || !m->from_library) return CUDA_ERROR_INVALID_HANDLE;
  Function* f = find_function_locked(m, name);
  if (!f) return CUDA_ERROR_NOT_FOUND;
  *kernel = reinterpret_cast<CUkernel>(f);
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  if (CUresult r = ensure_initialized()) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(lib);
  if (!m || !m->from_library) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned>(m->functions.size());
  return CUDA_SUCCESS;
}

CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int n, CUlibrary lib) {
  if (CUresult r = ensure_initialized()) return r;
  if (!kernels) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(lib);
  if (!m || !m->from_library) return CUDA_ERROR_INVALID_HANDLE;
  for (unsigned i = 0; i < n && i < m->functions.size(); ++i)
    kernels[i] = reinterpret_cast<CUkernel>(m->functions[i].get());
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetModule(CUmodule* mod, CUlibrary lib) {
  if (CUresult r = ensure_initialized()) return r;
  if (!mod) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Module* m = live_module_locked(lib);
  if (!m || !m->from_library) return CUDA_ERROR_INVALID_HANDLE;
  *mod = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary lib, const char* name) {
  return cuModuleGetGlobal_v2(dptr, bytes, reinterpret_cast<CUmodule>(lib), name);
}

CUresult cuKernelGetFunction(CUfunction* func, CUkernel kernel) {
  if (CUresult r = ensure_initialized()) return r;
  if (!func) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  if (!is_live(reinterpret_cast<Function*>(kernel))) return CUDA_ERROR_INVALID_HANDLE;
  *func = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}

CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(kernel);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}

CUresult cuFuncGetName(const char** name, CUfunction func) {
  return cuKernelGetName(name, reinterpret_cast<CUkernel>(func));
}

CUresult cuFuncGetModule(CUmodule* mod, CUfunction func) {
  if (!mod) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(func);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  *mod = reinterpret_cast<CUmodule>(f->module);
  return CUDA_SUCCESS;
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t index, size_t* offset, size_t* size) {
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(func);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (!f->info.params_known) return CUDA_ERROR_NOT_SUPPORTED;
  if (index >= f->info.param_sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = index < f->info.param_offsets.size() ? f->info.param_offsets[index] : 0;
  if (size) *size = f->info.param_sizes[index];
  return CUDA_SUCCESS;
}

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
  return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(kernel), index, offset, size);
}

CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attrib, CUfunction func) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(func);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (auto it = f->attributes.find(attrib); it != f->attributes.end()) {
    *value = it->second;
    return CUDA_SUCCESS;
  }
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = 16;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *value = kComputeMajor * 10 + kComputeMinor;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = f->max_dynamic_shared;
      break;
    default:
      *value = 0;
      break;
  }
  return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction func, CUfunction_attribute attrib, int value) {
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* f = reinterpret_cast<Function*>(func);
  if (!is_live_locked(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > 101376) return CUDA_ERROR_INVALID_VALUE;
    f->max_dynamic_shared = value;
  }
  f->attributes[attrib] = value;
  return CUDA_SUCCESS;
}

CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attrib, CUkernel kernel, CUdevice) {
  return cuFuncGetAttribute(value, attrib, reinterpret_cast<CUfunction>(kernel));
}

CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel kernel, CUdevice) {
  return cuFuncSetAttribute(reinterpret_cast<CUfunction>(kernel), attrib, value);
}

CUresult cuFuncSetCacheConfig(CUfunction func, CUfunc_cache) {
  return is_live(reinterpret_cast<Function*>(func)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // extern "C"
