// A program's system calls, counted by phase, by thread and by number, for tests/gpu/run.sh on a GPU
// machine that has neither strace nor perf: how many libslice adds to each cuLaunchKernel and each
// cuMemAlloc + cuMemFree (bench_calls --count, traced with and without libslice). The program runs
// under ptrace; the threads it makes are followed from their first instruction
// (PTRACE_O_TRACECLONE), and each system call's entry is counted in the current phase, for the
// program's first thread ("main", the one that makes the measured calls) apart from all others
// (the driver's and libslice's own threads, whose activity depends on time, not on the calls). The
// program marks its phases itself (phase_marker.h). Processes it forks are not followed: what they
// do is not a cost of the program's calls, and a daemon would keep the count from ending.
//   syscount -o REPORT [--regs] -- PROGRAM ARGS...
//   syscount --probe N   the self-check's program, whose system calls are known (run.sh)
// REPORT: "method=", "threads=" (traced threads, the first included), "markers=", "exit_status=", or
// "unsupported=WHY"; then "calls PHASE main|other NUMBER COUNT" per count. Numbers, not names: run.sh
// makes the table of names from this machine's <sys/syscall.h>.
// The number is read with PTRACE_GET_SYSCALL_INFO (Linux 5.3 and later, any architecture); where the
// kernel refuses it, or with --regs, from the registers, on x86_64 only; elsewhere the program is
// stopped and the report says "unsupported".
// Exit status: the program's (128 + the signal that ended it), or 125 when it could not be traced.
#include "phase_marker.h"

#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>

namespace {

constexpr int kUntraceable = 125;
constexpr int kProbeExit = 7;  // the probe's exit status when the signal it sent itself arrived

struct Report {
  std::string method;
  std::map<std::tuple<int, bool, unsigned long>, long> calls;  // (phase, main thread, number) -> count
  long threads = 1;
  long markers = 0;
  int exit_status = -1;
  std::string unsupported;
};

bool write_report(const char* path, const Report& r) {
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) return false;
  if (!r.unsupported.empty()) {
    std::fprintf(f, "unsupported=%s\n", r.unsupported.c_str());
  } else {
    std::fprintf(f, "method=%s\nthreads=%ld\nmarkers=%ld\nexit_status=%d\n", r.method.c_str(), r.threads, r.markers,
                 r.exit_status);
    for (const auto& [key, n] : r.calls) {
      const auto& [phase, main, nr] = key;
      std::fprintf(f, "calls %d %s %lu %ld\n", phase, main ? "main" : "other", nr, n);
    }
  }
  return std::fclose(f) == 0;
}

// The number and first argument of the system call a thread is stopped at, and whether the stop is
// its entry. False when they cannot be read.
struct Stop {
  bool entry = false;
  unsigned long nr = 0;
  unsigned long arg0 = 0;
};

bool read_info(pid_t tid, Stop* s) {
#ifdef PTRACE_GET_SYSCALL_INFO
  __ptrace_syscall_info info{};
  if (ptrace(PTRACE_GET_SYSCALL_INFO, tid, sizeof info, &info) <= 0) return false;
  s->entry = info.op == PTRACE_SYSCALL_INFO_ENTRY;
  s->nr = info.entry.nr;
  s->arg0 = info.entry.args[0];
  return true;
#else
  (void)tid, (void)s;
  return false;
#endif
}

// From the registers (x86_64): an entry is told from an exit by alternation, per thread.
bool read_regs(pid_t tid, bool* in_call, Stop* s) {
#if defined(__x86_64__)
  user_regs_struct regs{};
  if (ptrace(PTRACE_GETREGS, tid, nullptr, &regs) != 0) return false;
  s->entry = !*in_call;
  *in_call = !*in_call;
  s->nr = regs.orig_rax;
  s->arg0 = regs.rdi;
  return true;
#else
  (void)tid, (void)in_call, (void)s;
  return false;
#endif
}

int trace(const char* report_path, bool regs, char** argv) {
  Report r;
  int ready[2];  // the child writes errno here when it cannot be traced; closed by its exec
  if (pipe2(ready, O_CLOEXEC) != 0) return std::perror("syscount: pipe2"), kUntraceable;
  const pid_t child = fork();
  if (child < 0) return std::perror("syscount: fork"), kUntraceable;
  if (child == 0) {
    close(ready[0]);
    int err = 0;
    if (ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) {
      err = errno;
    } else {
      raise(SIGSTOP);  // the tracer sets its options before anything else happens
      execvp(argv[0], argv);
      err = -errno;  // negative: the exec failed, not the tracing
    }
    if (write(ready[1], &err, sizeof err) < 0) _exit(kUntraceable);
    _exit(kUntraceable);
  }
  close(ready[1]);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFSTOPPED(status)) {
    int err = 0;
    if (read(ready[0], &err, sizeof err) == sizeof err && err > 0) {
      r.unsupported = std::string("ptrace refused here: ") + std::strerror(err);
    } else {
      r.unsupported = "the child ended before it could be traced";
    }
    close(ready[0]);
    write_report(report_path, r);
    return kUntraceable;
  }
  const long options = PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL;
  if (ptrace(PTRACE_SETOPTIONS, child, nullptr, options) != 0) {
    r.unsupported = std::string("PTRACE_SETOPTIONS refused: ") + std::strerror(errno);
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    write_report(report_path, r);
    return kUntraceable;
  }
  r.method = regs ? "registers" : "syscall-info";
  std::set<pid_t> known = {child};
  std::map<pid_t, bool> in_call;  // the register method's alternation
  int phase = 0;
  ptrace(PTRACE_SYSCALL, child, nullptr, nullptr);  // on from the SIGSTOP, which is not delivered
  for (;;) {
    const pid_t tid = waitpid(-1, &status, __WALL);
    if (tid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: every traced thread has ended
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      if (tid == child) r.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      known.erase(tid);
      in_call.erase(tid);
      continue;
    }
    if (!WIFSTOPPED(status)) continue;
    const int sig = WSTOPSIG(status);
    int deliver = 0;
    if (sig == (SIGTRAP | 0x80)) {
      Stop s;
      bool ok = !regs && read_info(tid, &s);
#if defined(__x86_64__)
      if (!ok && !regs && errno != ESRCH && r.calls.empty() && r.markers == 0) {
        regs = true;  // no PTRACE_GET_SYSCALL_INFO here: the registers, from the first stop on
        r.method = "registers";
      }
#endif
      if (!ok && regs) ok = read_regs(tid, &in_call[tid], &s);
      if (!ok && errno == ESRCH) continue;  // killed while stopped (another thread's exit_group)
      if (!ok) {
        r.unsupported = std::string("cannot read a system call's number here: ") + std::strerror(errno);
        kill(child, SIGKILL);
        while (waitpid(-1, &status, __WALL) > 0) {
        }
        write_report(report_path, r);
        return kUntraceable;
      }
      if (s.entry) {
        const int marked = s.nr == SYS_close ? phase_marker::phase_of(s.arg0) : -1;
        if (marked >= 0) {
          phase = marked;
          ++r.markers;
        } else {
          ++r.calls[{phase, tid == child, s.nr}];
        }
      }
    } else if ((status >> 16) != 0) {
      // An event (a thread made, an exec): the new thread is traced already and stops on its own.
    } else if (known.count(tid) == 0) {
      known.insert(tid);  // a new thread's first stop, a SIGSTOP of the kernel's: not delivered
      ++r.threads;
      if (sig != SIGSTOP) deliver = sig;
    } else {
      deliver = sig;  // the program's own signal
    }
    ptrace(PTRACE_SYSCALL, tid, nullptr, deliver);
  }
  int err = 0;  // the exec's errno, when it failed
  if (read(ready[0], &err, sizeof err) == sizeof err && err < 0) {
    std::fprintf(stderr, "syscount: cannot run %s: %s\n", argv[0], std::strerror(-err));
  }
  close(ready[0]);
  if (!write_report(report_path, r)) {
    std::fprintf(stderr, "syscount: cannot write %s: %s\n", report_path, std::strerror(errno));
    return kUntraceable;
  }
  return r.exit_status < 0 ? kUntraceable : r.exit_status;
}

// Known system calls: phase 1, N getppid and N/2 getuid on the first thread; phase 2, N getppid on
// a second thread; phase 3, a signal sent to itself, which must arrive (the tracer passes signals
// on). Exit status 7 when it did, 8 when not.
std::atomic<int> g_signalled{0};

int probe(long n) {
  std::printf("getppid_nr=%ld\ngetuid_nr=%ld\nprobe_n=%ld\n", static_cast<long>(SYS_getppid),
              static_cast<long>(SYS_getuid), n);
  std::fflush(stdout);
  std::signal(SIGUSR1, [](int) { g_signalled = 1; });
  phase_marker::mark(1);
  for (long i = 0; i < n; ++i) syscall(SYS_getppid);
  for (long i = 0; i < n / 2; ++i) syscall(SYS_getuid);
  phase_marker::mark(2);
  std::thread([n] {
    for (long i = 0; i < n; ++i) syscall(SYS_getppid);
  }).join();
  phase_marker::mark(3);
  raise(SIGUSR1);
  return g_signalled ? kProbeExit : kProbeExit + 1;
}

int usage() {
  std::fprintf(stderr, "usage: syscount -o REPORT [--regs] -- PROGRAM ARGS... | syscount --probe N\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--probe") == 0) return probe(std::atol(argv[2]));
  const char* report = nullptr;
  bool regs = false;
  int i = 1;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      report = argv[++i];
    } else if (std::strcmp(argv[i], "--regs") == 0) {
      regs = true;
    } else {
      return usage();
    }
  }
  if (report == nullptr || i + 1 >= argc) return usage();
#if !defined(__x86_64__)
  if (regs) {
    Report r;
    r.unsupported = "--regs reads x86_64 registers only";
    write_report(report, r);
    return kUntraceable;
  }
#endif
  return trace(report, regs, argv + i + 1);
}
