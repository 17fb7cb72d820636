// Contexts: primary and ordinary, the per-thread context stack, synchronisation, limits.
#include <vector>

#include "driver.h"
#include "drv_thread.h"

namespace simgpu {

namespace {
// Defaults of the limits that take device memory, and the threads that each have a stack.
constexpr std::size_t kDefaultStack = 1024, kDefaultPrintfFifo = 1 << 20, kDefaultHeap = 8 << 20;
constexpr std::uint64_t kResidentThreads = 128 * 1536;  // multiprocessors x threads per multiprocessor

std::uint64_t limits_bytes(const Context& c) {
  const auto above = [&](CUlimit l, std::size_t def) -> std::uint64_t {
    const auto it = c.limits.find(l);
    return it != c.limits.end() && it->second > def ? it->second - def : 0;
  };
  return above(CU_LIMIT_MALLOC_HEAP_SIZE, kDefaultHeap) + above(CU_LIMIT_PRINTF_FIFO_SIZE, kDefaultPrintfFifo) +
         above(CU_LIMIT_STACK_SIZE, kDefaultStack) * kResidentThreads;
}

CUresult checked_context_locked(Context* c, const char* function = __builtin_FUNCTION()) {
  if (!is_live_locked(c, function) || !c->active) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}
}  // namespace

CUresult current_context(Context** out, const char* function) {
  if (CUresult r = ensure_initialized(function)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  return current_context_locked(out, function);
}

CUresult current_context_locked(Context** out, const char* function) {
  const std::vector<Context*>& stack = thread_contexts(function).contexts;
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = stack.back();
  // Only live contexts are ever pushed, so a dead one here was destroyed (by cuCtxDestroy on another
  // thread) while current to this thread: the driver documents CONTEXT_IS_DESTROYED for that case.
  if (!is_live_quiet_locked(c)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (CUresult r = checked_context_locked(c)) return r;
  *out = c;
  return CUDA_SUCCESS;
}

CUresult create_context(int device, unsigned flags, bool primary, Context** out) {
  Driver& g = driver();
  const std::uint64_t ctx_bytes = g.machine->header().context_bytes;
  if (ctx_bytes && !charge_device(device, ctx_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lk(g.mu);
  auto* c = new Context();
  c->device = device;
  c->flags = flags;
  c->primary = primary;
  c->charged = ctx_bytes;
  c->id = g.next_id++;
  c->null_stream = new Stream();
  c->null_stream->ctx = c;
  c->null_stream->legacy = true;
  c->null_stream->id = g.next_id++;
  c->limits[CU_LIMIT_STACK_SIZE] = kDefaultStack;
  c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = kDefaultPrintfFifo;
  c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = kDefaultHeap;
  c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
  c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 32;
  c->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
  add_live_locked(c);
  *out = c;
  return CUDA_SUCCESS;
}

void destroy_context_locked(Context* c) {
  // Frees what the context owns: its allocations and streams. Queued work is dropped only when the
  // caller already synchronized (cuCtxDestroy does).
  Driver& g = driver();
  for (auto it = g.allocations.begin(); it != g.allocations.end();) {
    Allocation& a = it->second;
    if (a.ctx == c && (a.kind == MemKind::device || a.kind == MemKind::managed)) {
      if (a.kind == MemKind::device) ipc_withdraw_locked(a.base);
      if (a.charged) g.machine->uncharge(a.device, a.charged);
      unmap_host_memory(reinterpret_cast<void*>(a.base), a.mapped);
      it = g.allocations.erase(it);
    } else {
      ++it;
    }
  }
  destroy_context_arrays_locked(c);   // arrays and mipmapped arrays go with their context too
  destroy_context_modules_locked(c);  // and its modules, with their globals
  if (c->limits_charged) g.machine->uncharge(c->device, c->limits_charged);
  c->limits_charged = 0;
  c->limits[CU_LIMIT_STACK_SIZE] = kDefaultStack;  // a primary context retained again starts afresh
  c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = kDefaultPrintfFifo;
  c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = kDefaultHeap;
  ipc_close_context_locked(c);  // and the mappings of other processes' memory it opened
  for (Stream* s : std::vector<Stream*>(c->streams)) destroy_stream_locked(s);
  if (c->charged) g.machine->uncharge(c->device, c->charged);
  c->charged = 0;
  std::erase(thread_contexts().contexts, c);
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  Driver& g = driver();
  Context* c = nullptr;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    c = g.primary[dev];
  }
  if (!c) {
    if (CUresult r = create_context(dev, 0, true, &c)) return r;
    std::lock_guard<std::mutex> lk(g.mu);
    g.primary[dev] = c;
  } else {
    std::lock_guard<std::mutex> lk(g.mu);
    if (!c->active) {
      const std::uint64_t ctx_bytes = g.machine->header().context_bytes;
      if (ctx_bytes && !g.machine->charge(dev, ctx_bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
      c->charged = ctx_bytes;
      c->active = true;
    }
  }
  std::lock_guard<std::mutex> lk(g.mu);
  c->primary_refs++;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  Driver& g = driver();
  Context* c = nullptr;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    c = g.primary[dev];
    if (!c || c->primary_refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (c->primary_refs > 1) {
      c->primary_refs--;
      return CUDA_SUCCESS;
    }
  }
  context_synchronize(c);
  std::lock_guard<std::mutex> lk(g.mu);
  if (--c->primary_refs == 0) {
    destroy_context_locked(c);
    c->active = false;
  }
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  Driver& g = driver();
  Context* c = nullptr;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    c = g.primary[dev];
  }
  if (!c || !c->active) return CUDA_SUCCESS;
  context_synchronize(c);
  std::lock_guard<std::mutex> lk(g.mu);
  destroy_context_locked(c);
  c->active = false;
  c->primary_refs = 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult r = ensure_initialized()) return r;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  Context* c = g.primary[dev];
  *flags = c ? c->flags : 0;
  *active = c && c->active && c->primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  if (CUresult r = ensure_initialized()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  if (flags & ~0x1Fu) return CUDA_ERROR_INVALID_VALUE;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  if (!g.primary[dev]) {
    // Remember the flags for the context still to be created.
    Context* c = nullptr;
    g.mu.unlock();
    CUresult r = create_context(dev, flags, true, &c);
    g.mu.lock();
    if (r) return r;
    c->active = false;
    if (c->charged) g.machine->uncharge(dev, c->charged);
    c->charged = 0;
    g.primary[dev] = c;
  }
  g.primary[dev]->flags = flags;
  return CUDA_SUCCESS;
}

static CUresult create_and_push(CUcontext* pctx, unsigned flags, CUdevice dev,
                                const char* function = __builtin_FUNCTION()) {
  if (CUresult r = ensure_initialized(function)) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  if (flags & ~0x3Fu) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = create_context(dev, flags, false, &c)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  thread_contexts(function).contexts.push_back(c);
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) { return create_and_push(pctx, flags, dev); }

CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n, unsigned int flags, CUdevice dev) {
  if (n < 0 || (n > 0 && !params)) return CUDA_ERROR_INVALID_VALUE;
  if (n > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  if (const auto inner = reinterpret_cast<decltype(&::cuCtxCreate_v2)>(export_through_the_linker("cuCtxCreate_v2")))
    return inner(pctx, flags, dev);  // SIMGPU_CALL_THROUGH_LINKER: through the preloaded hook
  return create_and_push(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  if (params && (params->numExecAffinityParams > 0 || params->cigParams))
    return CUDA_ERROR_NOT_SUPPORTED;  // execution affinity and CIG are not simulated
  if (const auto inner = reinterpret_cast<decltype(&::cuCtxCreate_v2)>(export_through_the_linker("cuCtxCreate_v2")))
    return inner(pctx, flags, dev);  // SIMGPU_CALL_THROUGH_LINKER: through the preloaded hook
  return create_and_push(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (CUresult r = ensure_initialized()) return r;
  auto* c = reinterpret_cast<Context*>(ctx);
  {
    std::lock_guard<std::mutex> lk(driver().mu);
    if (!is_live_locked(c) || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  }
  context_synchronize(c);
  std::lock_guard<std::mutex> lk(driver().mu);
  if (!is_live_locked(c)) return CUDA_ERROR_INVALID_CONTEXT;
  destroy_context_locked(c);
  remove_live_locked(c);
  // The object itself is kept: other threads may still name it and must get INVALID_CONTEXT.
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* c = reinterpret_cast<Context*>(ctx);
  if (CUresult r = checked_context_locked(c)) return r;
  thread_contexts().contexts.push_back(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  std::vector<Context*>& stack = thread_contexts().contexts;
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = stack.back();
  stack.pop_back();
  if (pctx) *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* c = reinterpret_cast<Context*>(ctx);
  std::vector<Context*>& stack = thread_contexts().contexts;
  if (!c) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (CUresult r = checked_context_locked(c)) return r;
  if (stack.empty())
    stack.push_back(c);
  else
    stack.back() = c;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = ensure_initialized()) return r;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  const std::vector<Context*>& stack = thread_contexts().contexts;
  *pctx = stack.empty() ? nullptr : reinterpret_cast<CUcontext>(stack.back());
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* dev) {
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  *dev = ordinal_of(c->device);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice_v2(CUdevice* dev, CUcontext ctx) {
  if (!ctx) return SIM_EXPORT_CALL(cuCtxGetDevice)(dev);
  if (CUresult r = ensure_initialized()) return r;
  if (!dev) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* c = reinterpret_cast<Context*>(ctx);
  if (CUresult r = checked_context_locked(c)) return r;
  *dev = ordinal_of(c->device);
  return CUDA_SUCCESS;
}

CUresult cuCtxGetFlags(unsigned int* flags) {
  if (!flags) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  *flags = c->flags;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetFlags(unsigned int flags) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  c->flags = flags;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (CUresult r = ensure_initialized()) return r;
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  Context* c = reinterpret_cast<Context*>(ctx);
  if (!c && current_context(&c) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  if (!is_live(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *id = c->id;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (CUresult r = ensure_initialized()) return r;
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  Context* c = reinterpret_cast<Context*>(ctx);
  if (!c && current_context(&c) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  if (!is_live(c)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 12010;  // the context API version every context of a CUDA 12+ driver reports
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  return context_synchronize(c, "cuCtxSynchronize");
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (!ctx) return SIM_EXPORT_CALL(cuCtxSynchronize)();
  if (CUresult r = ensure_initialized()) return r;
  auto* c = reinterpret_cast<Context*>(ctx);
  if (!is_live(c)) return CUDA_ERROR_INVALID_CONTEXT;
  return context_synchronize(c, "cuCtxSynchronize");
}

CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto it = c->limits.find(limit);
  if (it == c->limits.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  *value = it->second;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto it = c->limits.find(limit);
  if (it == c->limits.end()) return CUDA_ERROR_UNSUPPORTED_LIMIT;
  const std::size_t old = it->second;
  it->second = value;
  // The heap, the printf FIFO and every resident thread's stack are device memory: what they take
  // beyond their defaults is charged (or given back) now.
  const std::uint64_t bytes = limits_bytes(*c);
  if (bytes > c->limits_charged && !driver().machine->charge(c->device, bytes - c->limits_charged)) {
    it->second = old;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (bytes < c->limits_charged) driver().machine->uncharge(c->device, c->limits_charged - bytes);
  c->limits_charged = bytes;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  *config = c->cache_config;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  c->cache_config = config;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

CUresult cuCtxResetPersistingL2Cache() {
  Context* c = nullptr;
  return current_context(&c);
}

}  // extern "C"
