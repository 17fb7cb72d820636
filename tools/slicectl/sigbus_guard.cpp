#include "sigbus_guard.h"

#include <setjmp.h>
#include <signal.h>

namespace slicectl {

namespace {
sigjmp_buf g_fault;
void on_sigbus(int) { siglongjmp(g_fault, 1); }
}  // namespace

bool run_without_sigbus(const std::function<void()>& body) {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_sigbus;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &old);
  bool finished = false;
  if (sigsetjmp(g_fault, 1) == 0) {
    body();
    finished = true;
  }
  sigaction(SIGBUS, &old, nullptr);
  return finished;
}

}  // namespace slicectl
