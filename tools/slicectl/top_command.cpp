// slicectl top: the coordinator redrawn every --interval seconds on the terminal until q (or
// Ctrl-C); one plain snapshot instead when standard output is not a terminal, or with --once.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "cli.h"
#include "commands.h"
#include "screen_lines.h"
#include "signal_watch.h"
#include "status_model.h"
#include "terminal_screen.h"
#include "top_view.h"

namespace slicectl {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kMinInterval = 0.1, kMaxInterval = 3600;  // seconds

double parse_interval(const std::string& text) {
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(seconds) || seconds < kMinInterval || seconds > kMaxInterval)
    invalid_option("--interval", text, "a number of seconds from 0.1 to 3600", "2");
  return seconds;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%gs", s);
  return buf;
}

std::string clock_text() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

// The two lines above the GPUs.
std::vector<ScreenLine> heading(const CoordinatorStatus& s, const std::string& what) {
  const std::size_t n = s.tenants.size();
  return {{"slicectl top  " + clock_text() + "  " + std::to_string(n) + " tenant" + (n == 1 ? "" : "s") + " on " +
               std::to_string(s.devices.size()) + " GPU" + (s.devices.size() == 1 ? "" : "s") + "  " + what,
           {}},
          {"coordinator " + shown(s.dir, 200), {}},
          {}};
}

std::vector<ScreenLine> page(const CoordinatorStatus& s, const std::string& what, std::size_t columns) {
  std::vector<ScreenLine> lines = heading(s, what);
  for (ScreenLine& l : top_view(s, columns)) lines.push_back(std::move(l));
  return lines;
}

// Until q, Ctrl-C, SIGTERM or SIGHUP, or until the terminal is gone.
void live(const CommonOptions& common, double interval) {
  SignalWatch signals({SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP});
  const int keys = isatty(STDIN_FILENO) ? STDIN_FILENO : -1;
  TerminalScreen screen(keys, STDOUT_FILENO);
  const char* no_color = std::getenv("NO_COLOR");  // no-color.org
  const bool color = !(no_color && *no_color);
  const std::string what = "every " + seconds_text(interval) + "  q quits";
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval));
  while (true) {
    const WindowSize size = window_size(STDOUT_FILENO);
    const std::size_t columns = static_cast<std::size_t>(size.columns), rows = static_cast<std::size_t>(size.rows);
    std::vector<ScreenLine> lines;
    try {
      lines = page(read_status(common.coordinator, common.policy_dir), what, columns);
    } catch (const CommandError& e) {  // the coordinator went away: say so and keep looking
      lines = {{"slicectl top  " + clock_text() + "  " + what, {}}, {}, {shown(e.message, 300), {}}};
    }
    if (!screen.write(screen_frame(lines, columns, rows, color))) return;
    const Clock::time_point next = Clock::now() + period;
    bool redraw = false;
    while (!redraw) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
      if (left <= 0) break;
      pollfd key{keys, POLLIN, 0};
      signals.wait(&key, keys >= 0 ? 1 : 0, static_cast<int>(left));
      if (signals.take(SIGINT) | signals.take(SIGTERM) | signals.take(SIGHUP)) return;  // | : take every one
      if (signals.take(SIGTSTP)) {  // Ctrl-Z: the shell's terminal back while stopped
        screen.leave();
        kill(getpid(), SIGSTOP);
        screen.enter();
        redraw = true;
      }
      if (signals.take(SIGWINCH)) redraw = true;
      if (keys >= 0 && key.revents) {
        char typed[64];
        const ssize_t n = read(keys, typed, sizeof typed);
        if (n <= 0) return;  // the terminal is gone
        for (ssize_t i = 0; i < n; ++i)
          if (typed[i] == 'q' || typed[i] == 'Q' || typed[i] == '\x03') return;
      }
    }
  }
}

}  // namespace

int run_top(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  std::string value;
  double interval = 1;
  bool once = false;
  while (!args.done()) {
    if (args.option("--interval", value))
      interval = parse_interval(value);
    else if (args.flag("--once"))
      once = true;
    else if (!common.read(args))
      unknown_option(args.peek());
  }
  // A coordinator that cannot be read: exit 1 before drawing (none at all is an idle machine).
  const CoordinatorStatus first = read_status(common.coordinator, common.policy_dir);
  if (once || !isatty(STDOUT_FILENO)) {
    const std::size_t columns =
        isatty(STDOUT_FILENO) ? static_cast<std::size_t>(window_size(STDOUT_FILENO).columns) : 80;
    std::fputs(plain_text(page(first, "snapshot", columns), columns).c_str(), stdout);
    return kExitOk;
  }
  live(common, interval);
  return kExitOk;
}

}  // namespace slicectl
