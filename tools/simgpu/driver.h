// Process-wide state of the simulated driver, shared by the drv_*.cpp files that implement the API.
// Handles given to the application are pointers to these objects; every handle is checked against
// the map of live objects and their kinds before use, so a stale, made-up or wrong-kind handle gives
// the driver's error code, never a crash.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1  // declares every export by its real name (cuMemAlloc_v2, ...)
#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_runner.h"
#include "machine_state.h"
#include "module_image.h"
#include "violations.h"

namespace simgpu {

// The simulated driver's calls of its own exports (cuIpcOpenMemHandle -> cuIpcOpenMemHandle_v2,
// cuLaunch -> cuLaunchGridAsync, ...). Bound to its own definitions, like the real driver's
// (-Bsymbolic-functions), unless SIMGPU_CALL_THROUGH_LINKER=1: then each goes through the dynamic
// linker's global scope, where a preloaded library's hook of the export receives it on the calling
// thread, from inside that library's own call of the outer export (as NVML's calls of itself do: a
// library that holds a lock across the outer call and takes it again in the inner hook hangs there).
void* export_through_the_linker(const char* name);  // nullptr unless the mode is on and the name found
#define SIM_EXPORT_CALL(fn)                                                                                  \
  ([] {                                                                                                      \
    static const auto through = reinterpret_cast<decltype(&::fn)>(::simgpu::export_through_the_linker(#fn)); \
    return through != nullptr ? through : &::fn;                                                             \
  }())

constexpr int kComputeMajor = 8;
constexpr int kComputeMinor = 9;
constexpr int kDriverVersion = 13000;
constexpr std::uint64_t kDefaultKernelNs = 10'000;  // any kernel that is not a spin kernel
constexpr std::uint64_t kPitchAlignment = 512;
constexpr std::uint64_t kAllocAlignment = 512;

struct Context;
struct Stream;
struct Event;
struct MemPool;
struct Graph;
struct Function;

// One queued piece of stream work.
struct Op {
  enum class Kind { kernel, host, event_record, wait_event } kind = Kind::host;
  std::uint64_t seq = 0;
  std::uint64_t enqueued_ns = 0;  // when the host submitted it: a kernel cannot start before
  std::uint64_t kernel_ns = 0;
  std::function<void()> host;  // copies, sets, host functions, stream-ordered frees
  Event* event = nullptr;
  std::uint64_t event_generation = 0;
};

struct Stream {
  Context* ctx = nullptr;
  unsigned flags = 0;  // CU_STREAM_NON_BLOCKING or default
  int priority = 0;
  bool legacy = false;   // the context's NULL stream
  std::deque<Op> queue;  // guarded by g.mu
  bool head_running = false;
  bool in_busy_list = false;                    // listed in its device's streams with work (executor.cpp)
  std::uint64_t finished_ns = 0;                // device time at which its last completed work finished
  struct Capture* capture = nullptr;            // the capture it takes part in (capture.h), as origin or joined
  std::vector<struct GraphNode*> capture_deps;  // what its next captured node depends on
  std::uint64_t id = 0;
};

struct Event {
  Context* ctx = nullptr;
  unsigned flags = 0;
  std::uint64_t recorded = 0;   // generation of the last record enqueued
  std::uint64_t completed = 0;  // generation the device has reached
  std::uint64_t time_ns = 0;    // device time of the completed record
  // Last recorded in a capturing stream: a captured event (capture.h), standing for these nodes of
  // the capture with this id. 0: an ordinary record.
  std::uint64_t captured_id = 0;
  std::vector<struct GraphNode*> captured_deps;
};

struct Context {
  int device = 0;
  unsigned flags = 0;
  bool primary = false;
  bool active = true;  // a primary context whose refcount reached 0 is inactive
  int primary_refs = 0;
  std::uint64_t charged = 0;  // SIMGPU_CONTEXT_BYTES held for this context
  Stream* null_stream = nullptr;
  std::vector<Stream*> streams;  // created streams, not the NULL stream
  std::uint64_t id = 0;
  std::map<CUlimit, std::size_t> limits;
  // Device memory the limits take beyond their defaults (malloc heap, printf FIFO, stack for every
  // resident thread), charged on the device: NVML's per-process figure includes it, as on a real GPU.
  std::uint64_t limits_charged = 0;
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
};

// device: cuMemAlloc*, and cuMemMap ranges; graph: a graph allocation between its allocation and
// its free (drv_graph_memory.cpp); ipc: another process's allocation opened with cuIpcOpenMemHandle.
enum class MemKind { device, managed, host, pool, global, graph, ipc };

struct Allocation {
  std::uintptr_t base = 0;
  std::size_t size = 0;       // what the application asked for (or the pitch * height)
  std::size_t mapped = 0;     // the host mapping behind it
  std::uint64_t charged = 0;  // bytes charged on the device
  MemKind kind = MemKind::device;
  Context* ctx = nullptr;
  int device = 0;
  MemPool* pool = nullptr;
  std::uint64_t buffer_id = 0;
  unsigned host_flags = 0;
};

struct Function {
  std::string name;
  KernelInfo info;
  bool spin = false;
  struct Module* module = nullptr;
  int max_dynamic_shared = 48 * 1024;
  std::map<int, int> attributes;  // set with cuFuncSetAttribute
  // The deprecated execution-control state cuLaunch and cuLaunchGrid use (cuFuncSetBlockShape,
  // cuFuncSetSharedSize, cuParamSet*), guarded by g.mu.
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  std::vector<unsigned char> param_buffer;
};

struct Module {
  Context* ctx = nullptr;
  ModuleImage image;
  std::vector<std::unique_ptr<Function>> functions;
  std::map<std::string, std::pair<CUdeviceptr, std::size_t>> globals;
  bool from_library = false;
  std::uint64_t charged = 0;  // device memory its globals take (whole 2 MiB chunks), charged on ctx's device
};

struct DeviceExecutor;
struct IpcState;          // drv_ipc.cpp
struct GraphMemoryState;  // drv_graph_memory.cpp

// The kind of object behind each live handle: a handle of one kind passed where another is expected
// is refused like a stale one, never reinterpreted.
enum class HandleKind : std::uint8_t {
  context,
  stream,
  event,
  module,
  function,
  graph,
  graph_node,
  graph_exec,
  mem_pool,
  physical_allocation,
  array,
  mipmapped_array
};
template <class T>
struct HandleKindOf;
#define SIMGPU_HANDLE_KIND(T, K)                       \
  struct T;                                            \
  template <>                                          \
  struct HandleKindOf<T> {                             \
    static constexpr HandleKind value = HandleKind::K; \
  };
SIMGPU_HANDLE_KIND(Context, context)
SIMGPU_HANDLE_KIND(Stream, stream)
SIMGPU_HANDLE_KIND(Event, event)
SIMGPU_HANDLE_KIND(Module, module)
SIMGPU_HANDLE_KIND(Function, function)
SIMGPU_HANDLE_KIND(Graph, graph)
SIMGPU_HANDLE_KIND(GraphNode, graph_node)
SIMGPU_HANDLE_KIND(GraphExec, graph_exec)
SIMGPU_HANDLE_KIND(MemPool, mem_pool)
SIMGPU_HANDLE_KIND(PhysicalAllocation, physical_allocation)
SIMGPU_HANDLE_KIND(SimArray, array)
SIMGPU_HANDLE_KIND(SimMipmappedArray, mipmapped_array)
#undef SIMGPU_HANDLE_KIND

struct Driver {
  std::mutex mu;                         // guards everything below except the machine's own atomics
  std::condition_variable done_cv;       // stream/event progress, for host threads that synchronize
  std::atomic<bool> initialized{false};  // read without the lock on every call
  CUresult init_error = CUDA_SUCCESS;
  Machine* machine = nullptr;
  // The devices this process sees (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER: visible_devices.h):
  // device ordinals, which are the CUdevice values handed out, are positions in `visible`, which
  // holds physical indexes. Everything inside the simulator (contexts, allocations, pools, the
  // machine state, NVML) numbers devices physically; the API converts at its edge.
  int device_count = 0;
  int visible[kMaxDevices] = {};
  std::unordered_map<const void*, HandleKind> live;       // every live handle and what it is
  std::unordered_map<const void*, HandleKind> destroyed;  // handles destroyed since (see is_live_locked)
  std::vector<struct Capture*> captures;                  // stream captures in progress (capture.h)
  Context* primary[kMaxDevices] = {};
  MemPool* default_pool[kMaxDevices] = {};
  MemPool* current_pool[kMaxDevices] = {};
  DeviceExecutor* executors[kMaxDevices] = {};
  std::map<std::uintptr_t, Allocation> allocations;  // by base address
  std::uint64_t next_seq = 1;
  std::uint64_t next_id = 1;
  IpcState* ipc = nullptr;                   // exports and imports, made on first use
  GraphMemoryState* graph_memory = nullptr;  // the devices' graph memory pools, made on first use
};

Driver& driver();

// Reports the use of a destroyed handle (violations.h), naming its kind.
void report_destroyed_use(const char* function, const void* handle);

// --- helpers shared by the API files (g.mu must NOT be held unless the name says so) ---
// CUDA_ERROR_NOT_INITIALIZED before cuInit. Every entry point calls it first; it also reads back
// this thread's pthread keys (drv_thread.h), reporting a key that another library overwrote as a
// breach by `function`.
CUresult ensure_initialized(const char* function = __builtin_FUNCTION());
// A host function (cuLaunchHostFunc, cuStreamAddCallback, a graph's host node) runs as
// run_host_function(fn): the driver forbids CUDA calls inside one, and ensure_initialized then
// reports the call (violations.h) and answers CUDA_ERROR_NOT_PERMITTED.
void run_host_function(const std::function<void()>& fn);
// CUDA_ERROR_INVALID_CONTEXT when none; `function`: the entry point, for reports (drv_thread.h).
CUresult current_context(Context** out, const char* function = __builtin_FUNCTION());
// The same with g.mu held (and cuInit done).
CUresult current_context_locked(Context** out, const char* function = __builtin_FUNCTION());
// A handle the application hands in: live and of kind T. One that was destroyed (and whose address
// no new object took since) is also reported as a violation: on the real driver its use is undefined.
template <class T>
bool is_live_locked(const T* handle, const char* function = __builtin_FUNCTION()) {
  auto it = driver().live.find(handle);
  if (handle && it != driver().live.end() && it->second == HandleKindOf<T>::value) return true;
  if (handle && driver().destroyed.count(handle)) report_destroyed_use(function, handle);
  return false;
}
// The same for the simulator's own bookkeeping, which may look at objects it knows can be gone.
template <class T>
bool is_live_quiet_locked(const T* handle) {
  auto it = driver().live.find(handle);
  return handle && it != driver().live.end() && it->second == HandleKindOf<T>::value;
}
template <class T>
bool is_live(const T* handle, const char* function = __builtin_FUNCTION()) {  // takes g.mu
  std::lock_guard<std::mutex> lk(driver().mu);
  return is_live_locked(handle, function);
}
template <class T>
bool is_live_quiet(const T* handle) {  // takes g.mu
  std::lock_guard<std::mutex> lk(driver().mu);
  return is_live_quiet_locked(handle);
}
template <class T>
void add_live_locked(const T* handle) {
  driver().live[handle] = HandleKindOf<T>::value;
  driver().destroyed.erase(handle);
}
// The handle is destroyed: from now on a use of it is reported, until a new object takes the address.
inline void remove_live_locked(const void* handle) {
  auto it = driver().live.find(handle);
  if (it == driver().live.end()) return;
  driver().destroyed[handle] = it->second;
  driver().live.erase(it);
}
bool valid_device(CUdevice dev);    // a device ordinal of this process
int physical_device(CUdevice dev);  // its physical index; -1 when it is not one
CUdevice ordinal_of(int physical);  // the ordinal of a physical device; -1 when this process does not see it

// A potentially unsafe call (memory allocation or free) under the capture rules (capture.h): takes
// g.mu; CUDA_SUCCESS or the error to return.
CUresult unsafe_call_check(const char* function);

// Streams: resolves 0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD for the current context.
// `function`: the entry point, for reports (drv_thread.h).
CUresult resolve_stream(CUstream handle, bool per_thread_default, Stream** out,
                        const char* function = __builtin_FUNCTION());
CUresult resolve_stream_locked(CUstream handle, bool per_thread_default, Stream** out,  // g.mu held
                               const char* function = __builtin_FUNCTION());
void enqueue_locked(Stream* s, Op op);  // g.mu held
void enqueue(Stream* s, Op op);
// `function`: the API call that synchronises, for the capture rules (capture.h); a context
// synchronisation the driver does for itself (at a destroy or a free) passes nullptr.
CUresult stream_synchronize(Stream* s, const char* function);
CUresult context_synchronize(Context* c, const char* function = nullptr);
bool context_idle_locked(Context* c);
void destroy_stream_locked(Stream* s);

// Memory shared helpers
Allocation* find_allocation_locked(std::uintptr_t ptr);  // containing range
// Enters [base, base+size) in the process's address map; `mapped` is the host mapping behind it.
Allocation& record_allocation_locked(std::uintptr_t base, std::size_t size, std::size_t mapped, MemKind kind,
                                     Context* ctx, int device);
void* map_host_memory(std::size_t bytes);
// Memory another process can map (the shared arena, drv_memory.cpp): cuMemAlloc and cuMemAllocPitch.
void* map_device_memory(std::size_t bytes);
void unmap_host_memory(void* p, std::size_t bytes);  // either kind
class DeviceArena;
DeviceArena* shared_arena(bool create = true);          // nullptr when it cannot be made (or is not, yet)
constexpr std::size_t kSharedArenaTailBytes = 1 << 20;  // past the shared arena: the IPC export table
void forget_device_memory_after_fork();
bool charge_device(int device, std::uint64_t bytes);
void uncharge_device(int device, std::uint64_t bytes);
void pool_trim_at_sync(int device);  // release pooled memory above the threshold
// CUDA IPC (drv_ipc.cpp), g.mu held: whether cuIpcGetMemHandle accepts the allocation; forget the
// export of the allocation at `base` (freed); unmap what context `c` opened (destroyed).
bool ipc_exportable_locked(const Allocation& a);
void ipc_withdraw_locked(std::uintptr_t base);
void ipc_close_context_locked(Context* c);
// Graph memory (drv_graph_memory.cpp), g.mu held: the graph allocation at `base` was freed with
// cuMemFree or cuMemFreeAsync and its Allocation record erased.
void graph_allocation_freed_locked(std::uintptr_t base);
// The cuMemAddressReserve range that holds ptr (drv_vmm.cpp), g.mu held; false when there is none.
bool vmm_reservation_locked(std::uintptr_t ptr, std::uintptr_t* base, std::size_t* size);

// Kernels
std::uint64_t kernel_duration_ns(const Function* f, void** params, void** extra);

// Error names (cuda_errors.cpp): nullptr for a code the driver does not know.
const char* error_name(CUresult code);
const char* error_string(CUresult code);

// Context creation shared by cuCtxCreate* and the primary context.
CUresult create_context(int device, unsigned flags, bool primary, Context** out);
void destroy_context_locked(Context* c);
void destroy_context_arrays_locked(Context* c);   // drv_array.cpp: the arrays a context owns
void destroy_context_modules_locked(Context* c);  // drv_module.cpp: the modules loaded into it

}  // namespace simgpu
