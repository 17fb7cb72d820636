#include "signal_watch.h"

#include <time.h>

#include <csignal>

namespace slicectl {

namespace {

volatile std::sig_atomic_t caught[NSIG];

void note(int signal) { caught[signal] = 1; }

}  // namespace

SignalWatch::SignalWatch(std::initializer_list<int> signals) : signals_(signals) {
  sigset_t block;
  sigemptyset(&block);
  for (const int s : signals_) sigaddset(&block, s);
  sigprocmask(SIG_BLOCK, &block, &previous_mask_);
  waiting_mask_ = previous_mask_;
  for (const int s : signals_) {
    sigdelset(&waiting_mask_, s);
    caught[s] = 0;
    struct sigaction action {
    }, old{};
    action.sa_handler = note;
    sigemptyset(&action.sa_mask);
    sigaction(s, &action, &old);
    previous_.push_back(old);
  }
}

SignalWatch::~SignalWatch() {
  // Unblocked first: one still pending lands in note(), not in the default action.
  sigprocmask(SIG_SETMASK, &previous_mask_, nullptr);
  for (std::size_t i = 0; i < signals_.size(); ++i) sigaction(signals_[i], &previous_[i], nullptr);
}

int SignalWatch::wait(pollfd* fds, nfds_t count, int timeout_ms) {
  timespec limit{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1'000'000};
  return ppoll(fds, count, timeout_ms < 0 ? nullptr : &limit, &waiting_mask_);
}

bool SignalWatch::take(int signal) {
  if (!caught[signal]) return false;
  caught[signal] = 0;
  return true;
}

}  // namespace slicectl
