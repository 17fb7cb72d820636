// libslice's crash report (shim/crash_handler.cpp), on crash_probe under LD_PRELOAD with the
// simulated driver: a fault inside libslice is reported (version, signal, backtrace) and then
// reaches the application's own handler, or kills the process by the signal; a fault in the
// application is never reported and reaches its handler as often as it happens. The handlers are
// installed only with SLICE_CRASH_HANDLER=1: by default (and with 0) libslice installs nothing and
// says nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Outcome {
  int status = 0;
  std::string err;  // the probe's standard error
};

Outcome run_probe(const std::string& where, const std::string& handler, const std::string& crash_handler = "") {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // a probe killed by SIGSEGV leaves no core file behind
    setenv("LD_PRELOAD", SLICE_SHIM_PATH, 1);
    setenv("LD_LIBRARY_PATH", SIMGPU_LIB_DIR, 1);
    unsetenv("SLICE_LOG_FILE");
    unsetenv("SLICE_LOG_LEVEL");
    if (crash_handler.empty()) {
      unsetenv("SLICE_CRASH_HANDLER");
    } else {
      setenv("SLICE_CRASH_HANDLER", crash_handler.c_str(), 1);
    }
    execl(CRASH_PROBE_PATH, CRASH_PROBE_PATH, where.c_str(), handler.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fds[1]);
  Outcome out;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    out.err.append(buffer, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  waitpid(pid, &out.status, 0);
  return out;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool exited_with(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

TEST(CrashHandler, FaultInLibsliceIsReportedThenReachesTheApplicationsHandler) {
  const Outcome out = run_probe("libslice", "handler", "1");
  EXPECT_TRUE(exited_with(out.status, 42)) << out.status << "\n" << out.err;
  const auto report = out.err.find("] error: libslice " SLICE_VERSION_STRING " crashed in process ");
  ASSERT_NE(report, std::string::npos) << out.err;
  EXPECT_NE(out.err.find("with SIGSEGV (signal 11, code ", report), std::string::npos) << out.err;
  EXPECT_NE(out.err.find(", address 0x", report), std::string::npos) << out.err;  // the descriptor field read first
  EXPECT_NE(out.err.find("); backtrace:\n", report), std::string::npos) << out.err;
  // Frame 0 is the faulting instruction in libslice; the unwinder crossed the signal frame into
  // the probe's main.
  EXPECT_NE(out.err.find("error:   #0 0x"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("libslice.so+0x"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("shim_crash_probe+0x"), std::string::npos) << out.err;
  // Every line of the report is a log line, and the application's handler ran after it.
  const auto marker = out.err.find("probe: own handler ran");
  ASSERT_NE(marker, std::string::npos) << out.err;
  EXPECT_GT(marker, out.err.rfind("libslice.so+0x"));
  EXPECT_EQ(count_of(out.err, "libslice[") + 1, count_of(out.err, "\n")) << out.err;
}

TEST(CrashHandler, FaultInLibsliceWithoutAHandlerKillsBySignal) {
  const Outcome out = run_probe("libslice", "none", "1");
  ASSERT_TRUE(WIFSIGNALED(out.status)) << out.status << "\n" << out.err;
  EXPECT_EQ(WTERMSIG(out.status), SIGSEGV);
  EXPECT_NE(out.err.find(" crashed in process "), std::string::npos) << out.err;
}

TEST(CrashHandler, BeforeTheFirstLaunchTheReportHasTheFaultingFrameOnly) {
  // libunwind is loaded by the watcher thread, at the first launch, to keep it off the start-up
  // path; a fault before that is still reported, with the frame the signal gives.
  const Outcome out = run_probe("libslice-first", "handler", "1");
  EXPECT_TRUE(exited_with(out.status, 42)) << out.status << "\n" << out.err;
  EXPECT_NE(out.err.find(" crashed in process "), std::string::npos) << out.err;
  EXPECT_EQ(count_of(out.err, "error:   #"), 1) << out.err;
  EXPECT_NE(out.err.find("error:   #0 0x"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("libslice.so+0x"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("probe: own handler ran"), std::string::npos) << out.err;
}

TEST(CrashHandler, OffByDefaultAndWhenTurnedOff) {
  for (const char* off : {"", "0", "false", "no"}) {
    const Outcome out = run_probe("libslice-first", "handler", off);
    EXPECT_TRUE(exited_with(out.status, 42)) << out.status << "\n" << out.err;
    EXPECT_EQ(out.err.find("libslice["), std::string::npos) << out.err;
    EXPECT_NE(out.err.find("probe: own handler ran"), std::string::npos) << out.err;
  }
}

TEST(CrashHandler, FaultInTheApplicationPassesStraightOn) {
  for (const char* on : {"1", ""}) {
    const Outcome handled = run_probe("app", "handler", on);
    EXPECT_TRUE(exited_with(handled.status, 42)) << on << " " << handled.status << "\n" << handled.err;
    EXPECT_EQ(handled.err.find("libslice["), std::string::npos) << handled.err;

    const Outcome unhandled = run_probe("app", "none", on);
    ASSERT_TRUE(WIFSIGNALED(unhandled.status)) << on << " " << unhandled.status << "\n" << unhandled.err;
    EXPECT_EQ(WTERMSIG(unhandled.status), SIGSEGV);
    EXPECT_EQ(unhandled.err.find("libslice["), std::string::npos) << unhandled.err;
  }
}

TEST(CrashHandler, ApplicationFaultsItRecoversFromKeepWorking) {
  // A JVM takes SIGSEGV on purpose, again and again: each must reach its handler.
  for (const char* on : {"1", ""}) {
    const Outcome out = run_probe("app", "recover", on);
    EXPECT_TRUE(exited_with(out.status, 0)) << on << " " << out.status << "\n" << out.err;
    EXPECT_NE(out.err.find("probe: recovered 3 times"), std::string::npos) << out.err;
    EXPECT_EQ(out.err.find("libslice["), std::string::npos) << out.err;
  }
}

}  // namespace
