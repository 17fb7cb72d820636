#include "log_signal_safe.h"

#include <unistd.h>

#include <cerrno>

#include "log.h"

namespace slice::log {

SignalSafeLine::SignalSafeLine(LogLevel level) noexcept : level_(level) {
  text("libslice[").decimal(::getpid()).text("] ").text(to_string(level)).text(": ");
}

SignalSafeLine& SignalSafeLine::text(std::string_view s) noexcept {
  for (const char c : s) {
    if (size_ + 1 >= kCapacity) break;  // room for the newline stays
    buffer_[size_++] = c;
  }
  return *this;
}

SignalSafeLine& SignalSafeLine::decimal(std::int64_t n) noexcept {
  char digits[24];
  std::size_t count = 0;
  std::uint64_t magnitude = n < 0 ? 0 - static_cast<std::uint64_t>(n) : static_cast<std::uint64_t>(n);
  do {
    digits[count++] = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude != 0);
  if (n < 0) digits[count++] = '-';
  char in_order[24];
  for (std::size_t i = 0; i < count; ++i) in_order[i] = digits[count - 1 - i];
  return text(std::string_view(in_order, count));
}

SignalSafeLine& SignalSafeLine::hex(std::uintptr_t n) noexcept {
  char digits[2 + 2 * sizeof n];
  std::size_t count = 0;
  do {
    digits[count++] = "0123456789abcdef"[n & 0xf];
    n >>= 4;
  } while (n != 0);
  char in_order[2 + 2 * sizeof n] = {'0', 'x'};
  for (std::size_t i = 0; i < count; ++i) in_order[2 + i] = digits[count - 1 - i];
  return text(std::string_view(in_order, 2 + count));
}

void SignalSafeLine::write() noexcept {
  if (!enabled(level_)) return;
  buffer_[size_++] = '\n';
  const int saved_errno = errno;  // a signal handler must leave errno as it found it
  const char* data = buffer_;
  std::size_t left = size_;
  while (left > 0) {
    const ssize_t n = ::write(destination_fd(), data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  size_ -= 1;
  errno = saved_errno;
}

}  // namespace slice::log
