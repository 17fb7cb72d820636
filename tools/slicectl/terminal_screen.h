// The terminal while slicectl top draws on it: the alternate screen (the shell's text comes back
// afterwards), the cursor hidden, and keys read as they are typed, without echo. Plain ANSI escape
// sequences and termios: any terminal an ssh session gives has them.
#pragma once

#include <termios.h>

#include <string_view>

namespace slicectl {

struct WindowSize {
  int columns = 80;
  int rows = 24;
};

// The size of the terminal on `fd`; 80x24 when it says none.
WindowSize window_size(int fd);

class TerminalScreen {
 public:
  // Keys come from key_fd (a terminal), or from nowhere when it is -1.
  TerminalScreen(int key_fd, int out_fd);
  ~TerminalScreen();  // the terminal as it was
  TerminalScreen(const TerminalScreen&) = delete;
  TerminalScreen& operator=(const TerminalScreen&) = delete;

  void leave();  // the terminal as it was (to stop on Ctrl-Z, or to exit)
  void enter();  // drawing again

  // Writes all of `text`; false when the terminal is gone (hung up).
  bool write(std::string_view text);

 private:
  int key_fd_, out_fd_;
  termios saved_{};
  bool have_saved_ = false;
  bool entered_ = false;
};

}  // namespace slicectl
