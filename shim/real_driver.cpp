// The real driver and NVML, reached only through libslice's own dlopen handles. Resolved lazily and
// once per library, so a process that never calls CUDA or NVML never opens them, and the first call
// may come from any thread. real_function's fast path is inline (shim.h).
//
// No lock is held across the dlopen: the library's constructors run inside it, and one that calls an
// export of its own through the dynamic linker reaches libslice's hook of it on the same thread
// (which passes it straight to the real function: hook_frame.h). That thread finds its library
// being opened by itself and looks the function up in the library as it stands (RTLD_NOLOAD: the
// object is already in the process while its constructors run); other threads open it themselves
// rather than wait (while_opening).
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>

#include "fork_guard.h"
#include "keep_errno.h"
#include "shim.h"

namespace slice::shim {

namespace detail {
constinit RealFunctions g_real_cuda;
constinit RealFunctions g_real_nvml;
}  // namespace detail

namespace {

struct RealLibrary {
  constexpr RealLibrary(detail::RealFunctions& t, HookLibrary w, const char* s) : table(t), which(w), soname(s) {}
  enum : std::uint32_t { kClosed, kOpening, kOpen };
  std::atomic<std::uint32_t> state{kClosed};
  std::atomic<pid_t> opener{0};  // the thread opening it, while kOpening
  void* handle = nullptr;
  detail::RealFunctions& table;  // filled for this library's hooks only
  HookLibrary which;
  const char* soname;
};

// Constant-initialized: nothing runs at load time.
constinit RealLibrary g_cuda(detail::g_real_cuda, HookLibrary::cuda, "libcuda.so.1");
constinit RealLibrary g_nvml(detail::g_real_nvml, HookLibrary::nvml, "libnvidia-ml.so.1");
std::atomic<DlsymFn> g_real_dlsym{nullptr};

void open_library(RealLibrary& lib) {
  struct MarkOpened {
    RealLibrary& lib;
    ~MarkOpened() { lib.table.opened.store(true, std::memory_order_release); }  // after the table
  } mark{lib};
  void* handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return;  // no driver: the wrappers answer as an absent driver would
  lib.handle = handle;
  const DlsymFn lookup = real_dlsym();
  if (lookup == nullptr) return;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    const HookInfo& info = hook_info(static_cast<Hook>(i));
    if (info.library == lib.which) lib.table.functions[i] = lookup(handle, info.name);
  }
}

// The library once it is open (or found absent); nullptr while another call is opening it, which
// then looks its function up itself (while_opening). Nobody waits for the opener: it may be blocked
// on the loader's lock that the waiter holds (a constructor of another library calling CUDA), and a
// child forked during the open would wait for a thread it does not have.
RealLibrary* opened(RealLibrary& lib) {
  std::uint32_t state = lib.state.load(std::memory_order_acquire);
  if (state == RealLibrary::kOpen) return &lib;
  if (state == RealLibrary::kClosed) install_fork_handlers();  // before the open a fork may interrupt
  if (state == RealLibrary::kClosed && lib.state.compare_exchange_strong(state, RealLibrary::kOpening)) {
    lib.opener.store(gettid(), std::memory_order_relaxed);
    open_library(lib);
    lib.opener.store(0, std::memory_order_relaxed);
    lib.state.store(RealLibrary::kOpen, std::memory_order_release);
    return &lib;
  }
  return state == RealLibrary::kOpen ? &lib : nullptr;
}

// A function of a library that is being opened: looked up in it by this thread. The opener itself
// (its constructors call in) finds it as it stands, already in the process (RTLD_NOLOAD). Any other
// thread opens it itself: the loader serialises the two opens (and lets a thread that holds its lock
// open again), so the function it gets is that of the library, whole. That reference is kept: the
// library is never closed, and the function must outlive this call.
void* while_opening(const RealLibrary& lib, const char* name) noexcept {
  const KeepErrno keep;
  const bool self = lib.opener.load(std::memory_order_relaxed) == gettid();
  void* handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL | (self ? RTLD_NOLOAD : 0));
  const DlsymFn lookup = real_dlsym();
  void* fn = handle != nullptr && lookup != nullptr ? lookup(handle, name) : nullptr;
  if (handle != nullptr && self) dlclose(handle);  // NOLOAD took a reference of its own
  return fn;
}

}  // namespace

DlsymFn real_dlsym() noexcept {
  DlsymFn fn = g_real_dlsym.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // dlvsym is not hooked, so this cannot come back to us. Racing threads store the same value.
  void* sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (sym == nullptr) sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  fn = reinterpret_cast<DlsymFn>(sym);
  g_real_dlsym.store(fn, std::memory_order_release);
  return fn;
}

void* detail::open_real_function(Hook hook) noexcept {
  const auto i = static_cast<std::size_t>(hook);
  RealLibrary& lib = kHookLibraries[i] == HookLibrary::cuda ? g_cuda : g_nvml;
  const RealLibrary* open = opened(lib);
  return open != nullptr ? open->table.functions[i] : while_opening(lib, hook_info(hook).name);
}

namespace {
void* real_symbol(RealLibrary& lib, const char* name) noexcept {
  const RealLibrary* open = opened(lib);
  if (open == nullptr) return while_opening(lib, name);
  const DlsymFn lookup = real_dlsym();
  return open->handle != nullptr && lookup != nullptr ? lookup(open->handle, name) : nullptr;
}
}  // namespace

// A forked child: an open under way on a thread that is not in the child starts again there.
void real_driver_after_fork_in_child() noexcept {
  for (RealLibrary* lib : {&g_cuda, &g_nvml}) {
    std::uint32_t opening = RealLibrary::kOpening;
    lib->state.compare_exchange_strong(opening, RealLibrary::kClosed);
  }
}

void* real_cuda_symbol(const char* name) noexcept { return real_symbol(g_cuda, name); }
void* real_nvml_symbol(const char* name) noexcept { return real_symbol(g_nvml, name); }

}  // namespace slice::shim
