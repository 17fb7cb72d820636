// Signals that a long-running subcommand (top, metrics --listen) answers instead of dying: they
// are blocked from construction on and delivered only while it waits in wait() (ppoll), so none
// can slip in between checking the flags and going to sleep.
#pragma once

#include <poll.h>
#include <signal.h>

#include <initializer_list>
#include <vector>

namespace slicectl {

class SignalWatch {
 public:
  explicit SignalWatch(std::initializer_list<int> signals);
  ~SignalWatch();  // the previous mask and handlers again
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

  // poll() on `fds` for at most timeout_ms (-1: no limit) with the watched signals let through;
  // poll's result (-1 with errno EINTR when one came).
  int wait(pollfd* fds, nfds_t count, int timeout_ms);
  // Whether `signal` came since the last take of it.
  bool take(int signal);

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  sigset_t previous_mask_{};
  sigset_t waiting_mask_{};  // the previous mask without the watched signals
};

}  // namespace slicectl
