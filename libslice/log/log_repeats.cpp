#include "log_repeats.h"

namespace slice::log {

std::string RepeatSummary::line() const {
  return message + " (repeated " + std::to_string(suppressed) + " more times in the last " + std::to_string(seconds) +
         " s)";
}

RepeatSummary RepeatFilter::summary_of(Tracked& t, std::int64_t now_ns) {
  const std::int64_t elapsed = now_ns > t.window_start ? now_ns - t.window_start : 0;
  const auto seconds = static_cast<std::uint64_t>((elapsed + 999'999'999) / 1'000'000'000);
  RepeatSummary s{t.level, t.message, t.suppressed, seconds == 0 ? 1 : seconds};
  t.suppressed = 0;
  return s;
}

RepeatFilter::Tracked& RepeatFilter::slot_for_new_line(std::int64_t now_ns, std::vector<RepeatSummary>& due) {
  Tracked* oldest = &tracked_[0];
  for (Tracked& t : tracked_) {
    if (!t.used) return t;
    if (t.window_start < oldest->window_start) oldest = &t;
  }
  // Full: the line seen least recently makes room, and says what it had suppressed first.
  if (oldest->suppressed > 0) due.push_back(summary_of(*oldest, now_ns));
  return *oldest;
}

bool RepeatFilter::admit(LogLevel level, std::string_view message, std::int64_t now_ns,
                         std::vector<RepeatSummary>& due) {
  Tracked* match = nullptr;
  for (Tracked& t : tracked_) {
    if (!t.used) continue;
    if (t.level == level && t.message == message) {
      match = &t;
    } else if (t.suppressed > 0 && now_ns - t.window_start >= kWindowNs) {
      due.push_back(summary_of(t, now_ns));  // its window closed without the line coming back
    }
  }
  if (match == nullptr) {
    Tracked& t = slot_for_new_line(now_ns, due);
    t = Tracked{true, level, std::string(message), now_ns, 1, 0};
    return true;
  }
  if (now_ns - match->window_start >= kWindowNs) {
    if (match->suppressed > 0) due.push_back(summary_of(*match, now_ns));
    match->window_start = now_ns;
    match->seen = 1;
    return true;
  }
  if (++match->seen <= kBurst) return true;
  ++match->suppressed;
  return false;
}

void RepeatFilter::drain(std::int64_t now_ns, std::vector<RepeatSummary>& due) {
  for (Tracked& t : tracked_) {
    if (t.used && t.suppressed > 0) due.push_back(summary_of(t, now_ns));
  }
}

void RepeatFilter::clear() { tracked_.fill(Tracked{}); }

}  // namespace slice::log
