#include "futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace slice {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex is a plain 32-bit word");

WaitResult futex_wait(const std::atomic<std::uint32_t>* word, std::uint32_t expected, std::uint64_t timeout_ns,
                      bool shared) {
  const timespec timeout{static_cast<time_t>(timeout_ns / 1'000'000'000),
                         static_cast<long>(timeout_ns % 1'000'000'000)};
  const long rc = syscall(SYS_futex, word, shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, expected, &timeout, nullptr, 0);
  if (rc == 0) return WaitResult::changed;
  if (errno == ETIMEDOUT) return WaitResult::timed_out;
  if (errno == EAGAIN || errno == EINTR) return WaitResult::changed;
  if (errno == EFAULT) return WaitResult::failed;  // the word's file was truncated under the mapping
  // No futex to be had (a seccomp profile that refuses it, say): a plain sleep, so that the
  // caller's loop does not spin.
  timespec left = timeout;
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  return WaitResult::timed_out;
}

void futex_wake_all(const std::atomic<std::uint32_t>* word, bool shared) {
  syscall(SYS_futex, word, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace slice
