#include "crash_handler.h"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string_view>

#include "log_signal_safe.h"

#ifndef SLICE_VERSION_STRING
#error "SLICE_VERSION_STRING (the project version) is defined by shim/CMakeLists.txt"
#endif

namespace slice::shim {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
constexpr int kSignalCount = sizeof kSignals / sizeof kSignals[0];
constexpr int kMaxFrames = 64;

// Everything the handler reads is set before the handlers are installed, and plain data: the
// handler may run in any thread at any moment.
struct sigaction g_previous[kSignalCount];

struct TextRange {
  std::uintptr_t begin, end;
};
constexpr int kMaxRanges = 8;
TextRange g_own_text[kMaxRanges];
int g_own_text_count = 0;

using UnwBacktrace = int (*)(void**, int);
// Set once, by load_crash_unwinder() on another thread; a lock-free atomic is safe to read in the
// handler.
std::atomic<UnwBacktrace> g_unw_backtrace{nullptr};

char g_executable[512] = "?";  // the main program's path: its link_map names it ""

std::atomic<bool> g_installed{false};

int slot_of(int sig) {
  for (int i = 0; i < kSignalCount; ++i)
    if (kSignals[i] == sig) return i;
  return -1;
}

std::string_view signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    default:
      return "signal";
  }
}

std::uintptr_t faulting_pc(const void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return static_cast<std::uintptr_t>(uc->uc_mcontext.pc);
#else
  (void)uc;
  return 0;  // unknown architecture: never ours, every fault passes straight on
#endif
}

bool in_own_text(std::uintptr_t pc) {
  for (int i = 0; i < g_own_text_count; ++i)
    if (pc >= g_own_text[i].begin && pc < g_own_text[i].end) return true;
  return false;
}

// The executable segments of the object that holds this function: libslice.so.
int record_own_text(dl_phdr_info* info, std::size_t, void*) {
  const auto self = reinterpret_cast<std::uintptr_t>(&record_own_text);
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const std::uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && self >= begin && self < begin + ph.p_memsz) mine = true;
  }
  if (!mine) return 0;
  for (int i = 0; i < info->dlpi_phnum && g_own_text_count < kMaxRanges; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
    const std::uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    g_own_text[g_own_text_count++] = {begin, begin + ph.p_memsz};
  }
  return 1;
}

// One backtrace line: `#n 0xADDR object+0xOFFSET` (addr2line -e object OFFSET gives the source).
// _dl_find_object is async-signal-safe; dladdr is not.
void write_frame(int n, std::uintptr_t address) {
  log::SignalSafeLine line(LogLevel::error);
  line.text("  #").decimal(n).text(" ").hex(address);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
  dl_find_object found{};
  if (_dl_find_object(reinterpret_cast<void*>(address), &found) == 0 && found.dlfo_link_map != nullptr) {
    const link_map* map = found.dlfo_link_map;
    const char* name = map->l_name != nullptr && map->l_name[0] != '\0' ? map->l_name : g_executable;
    line.text(" ").text(name).text("+").hex(address - map->l_addr);
  }
#endif
  line.write();
}

void write_report(int sig, const siginfo_t* info, std::uintptr_t pc) {
  log::SignalSafeLine(LogLevel::error)
      .text("libslice " SLICE_VERSION_STRING " crashed in process ")
      .decimal(::getpid())
      .text(" (")
      .text(g_executable)
      .text(") with ")
      .text(signal_name(sig))
      .text(" (signal ")
      .decimal(sig)
      .text(", code ")
      .decimal(info->si_code)
      .text(", address ")
      .hex(reinterpret_cast<std::uintptr_t>(info->si_addr))
      .text("); backtrace:")
      .write();
  void* frames[kMaxFrames];
  const UnwBacktrace unwind = g_unw_backtrace.load(std::memory_order_acquire);
  const int count = unwind != nullptr ? unwind(frames, kMaxFrames) : 0;
  // The unwinder starts in this handler; the report starts at the faulting instruction.
  int first = 0;
  while (first < count && reinterpret_cast<std::uintptr_t>(frames[first]) != pc) ++first;
  if (first == count) {
    write_frame(0, pc);  // no unwinder, or it could not cross the signal frame
    return;
  }
  for (int i = first; i < count; ++i) write_frame(i - first, reinterpret_cast<std::uintptr_t>(frames[i]));
}

// A fault raised by the CPU, not a signal sent with kill() or raise(): only such a fault
// happens again when the handler returns.
bool is_fault(const siginfo_t* info) { return info != nullptr && info->si_code > 0; }

// What the kernel would have done had libslice never installed anything.
void pass_on(int slot, int sig, siginfo_t* info, void* context) {
  struct sigaction& previous = g_previous[slot];
  if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
    if (previous.sa_handler == SIG_IGN && !is_fault(info)) return;  // an ignored kill()
    // Put the old action back: a fault happens again when we return and the kernel applies it
    // (an ignored fault kills, as it would have); a sent signal is sent again.
    sigaction(sig, &previous, nullptr);
    if (!is_fault(info)) raise(sig);  // blocked until we return
    return;
  }
  // A handler of the application's: call it as the kernel would have, with its mask.
  sigset_t mask = previous.sa_mask;
  if ((previous.sa_flags & SA_NODEFER) == 0) sigaddset(&mask, sig);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  if ((previous.sa_flags & SA_NODEFER) != 0) {
    sigset_t self;
    sigemptyset(&self);
    sigaddset(&self, sig);
    pthread_sigmask(SIG_UNBLOCK, &self, nullptr);
  }
  const struct sigaction called = previous;
  if ((previous.sa_flags & SA_RESETHAND) != 0) {
    previous.sa_handler = SIG_DFL;  // one-shot, as it was installed
    previous.sa_flags &= ~SA_SIGINFO;
  }
  if ((called.sa_flags & SA_SIGINFO) != 0) {
    called.sa_sigaction(sig, info, context);
  } else {
    called.sa_handler(sig);
  }
  // Returning restores the mask the signal interrupted (the kernel's, from the context).
}

void on_fault(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const int slot = slot_of(sig);
  if (slot < 0) return;
  const std::uintptr_t pc = faulting_pc(context);
  if (is_fault(info) && in_own_text(pc)) {
    write_report(sig, info, pc);
    // Gone, as if never installed: the same instruction faults again under the previous action.
    sigaction(sig, &g_previous[slot], nullptr);
  } else {
    pass_on(slot, sig, info, context);
  }
  errno = saved_errno;
}

}  // namespace

void install_crash_handlers() noexcept {
  if (g_installed.exchange(true)) return;
  dl_iterate_phdr(record_own_text, nullptr);
  if (g_own_text_count == 0) return;  // cannot tell our faults from others': stay out of the way
  if (const ssize_t n = ::readlink("/proc/self/exe", g_executable, sizeof g_executable - 1); n > 0)
    g_executable[n] = '\0';
  for (int i = 0; i < kSignalCount; ++i) {
    if (sigaction(kSignals[i], nullptr, &g_previous[i]) != 0) continue;
    struct sigaction ours {};
    ours.sa_sigaction = on_fault;
    sigemptyset(&ours.sa_mask);
    // SA_ONSTACK: the thread's alternate stack if the application gave it one, else its own.
    // SA_RESTART as the previous action had it, for a sent signal that interrupts a system call.
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK | (g_previous[i].sa_flags & SA_RESTART);
    sigaction(kSignals[i], &ours, nullptr);
  }
}

void load_crash_unwinder() noexcept {
  static std::atomic<bool> loading{false};
  if (!g_installed.load() || g_own_text_count == 0 || loading.exchange(true)) return;
  // Never in the handler: dlopen is not async-signal-safe.
  if (void* unwind = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL)) {
    if (auto fn = reinterpret_cast<UnwBacktrace>(dlsym(unwind, "unw_backtrace"))) {
      void* warm_up[4];
      fn(warm_up, 4);
      g_unw_backtrace.store(fn, std::memory_order_release);
    }
  }
}

}  // namespace slice::shim
