#include "terminal_screen.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

namespace slicectl {

namespace {

// Alternate screen on, cursor hidden, screen cleared; and back.
constexpr std::string_view kEnter = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
constexpr std::string_view kLeave = "\x1b[?25h\x1b[?1049l";

}  // namespace

WindowSize window_size(int fd) {
  winsize ws{};
  WindowSize size;
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0) {
    if (ws.ws_col > 0) size.columns = ws.ws_col;
    if (ws.ws_row > 0) size.rows = ws.ws_row;
  }
  return size;
}

TerminalScreen::TerminalScreen(int key_fd, int out_fd) : key_fd_(key_fd), out_fd_(out_fd) {
  have_saved_ = key_fd_ >= 0 && tcgetattr(key_fd_, &saved_) == 0;
  enter();
}

TerminalScreen::~TerminalScreen() { leave(); }

void TerminalScreen::enter() {
  if (entered_) return;
  if (have_saved_) {
    // Keys one at a time, not echoed; Ctrl-C and Ctrl-Z still send their signals (ISIG stays).
    termios keys = saved_;
    keys.c_lflag &= ~(ICANON | ECHO);
    keys.c_cc[VMIN] = 1;
    keys.c_cc[VTIME] = 0;
    tcsetattr(key_fd_, TCSANOW, &keys);
  }
  write(kEnter);
  entered_ = true;
}

void TerminalScreen::leave() {
  if (!entered_) return;
  write(kLeave);
  if (have_saved_) tcsetattr(key_fd_, TCSANOW, &saved_);
  entered_ = false;
}

bool TerminalScreen::write(std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(out_fd_, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace slicectl
