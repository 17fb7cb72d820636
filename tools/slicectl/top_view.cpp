#include "top_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "cli.h"
#include "limits_text.h"
#include "text_table.h"

namespace slicectl {

namespace {

using Align = TextTable::Align;

constexpr std::string_view kMarkers = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::size_t kIndent = 2;

// Each tenant's letter and colour: its place among all tenants (by name), so the same on every GPU.
struct TenantMark {
  char letter;
  int color;
};

TenantMark mark_of(const CoordinatorStatus& s, const slice::TenantView* tenant) {
  const std::size_t i = static_cast<std::size_t>(tenant - s.tenants.data());
  return {kMarkers[i % kMarkers.size()], static_cast<int>(i)};
}

std::string percent_text(double fraction) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f%%", fraction * 100.0);
  return s;
}

// "  memory   [AAAABB......]  6.2%": each tenant's part of the whole, in its letter and colour,
// '.' for what none of them has.
struct BarPart {
  TenantMark mark;
  double fraction;
};

ScreenLine bar_line(std::string_view label, const std::vector<BarPart>& parts, std::size_t columns) {
  double total = 0;
  for (const BarPart& p : parts) total += std::clamp(p.fraction, 0.0, 1.0);
  const std::string head = std::string(kIndent, ' ') + std::string(label) + " [";
  const std::string tail = "] " + percent_text(std::min(total, 1.0));
  // The bar takes what the rest of the line leaves ("] 100.0%" at most): at least 10 columns (a
  // narrow window cuts the line).
  constexpr std::size_t kTail = 8;
  const std::size_t width =
      std::max<std::size_t>(10, columns > head.size() + kTail ? columns - head.size() - kTail : 0);
  ScreenLine line{head, {}};
  double cumulative = 0;
  std::size_t filled = 0;
  for (const BarPart& p : parts) {
    cumulative = std::min(1.0, cumulative + std::clamp(p.fraction, 0.0, 1.0));
    const std::size_t end = static_cast<std::size_t>(std::lround(cumulative * static_cast<double>(width)));
    if (end <= filled) continue;
    line.colors.push_back({line.text.size(), line.text.size() + end - filled, p.mark.color});
    line.text.append(end - filled, p.mark.letter);
    filled = end;
  }
  line.text.append(width - filled, '.');
  line.text += tail;
  return line;
}

std::string device_heading(const DeviceStatus& d, std::size_t columns) {
  const std::string use =
      d.total_bytes ? " (" + percent_text(static_cast<double>(d.used_bytes) / static_cast<double>(d.total_bytes)) + ")"
                    : "";
  const std::string heading = "GPU " + std::to_string(d.index) + "  " + shown(d.name) + "  " +
                              slice::describe_bytes(d.used_bytes) + " of " + slice::describe_bytes(d.total_bytes) + use;
  // The UUID whole or not at all (slicectl status shows it always).
  return heading.size() + 2 + d.uuid.size() <= columns ? heading + "  " + d.uuid : heading;
}

std::vector<ScreenLine> device_lines(const CoordinatorStatus& s, const DeviceStatus& d, std::size_t columns) {
  std::vector<ScreenLine> out;
  out.push_back({device_heading(d, columns), {}});
  std::vector<BarPart> memory, time;
  for (const TenantOnDevice& on : d.tenants) {
    const TenantMark m = mark_of(s, on.tenant);
    const double total = static_cast<double>(d.total_bytes);
    memory.push_back({m, total > 0 ? static_cast<double>(on.usage().used_bytes) / total : 0.0});
    time.push_back({m, on.usage().compute_used_1s.value_or(0.0)});
  }
  out.push_back(bar_line("memory  ", memory, columns));
  out.push_back(bar_line("time 1s ", time, columns));

  // The tenants: a table whose first column (names) is cut when the window is too narrow for it.
  struct Row {
    std::vector<std::string> cells;
    std::optional<TenantMark> mark;  // on a tenant's row: its letter is the first column's first byte
  };
  std::vector<Row> rows;
  rows.push_back({{"  TENANT", "PROCS", "MEMORY USED / CAP", "SHARE", "GOT 1s", "10s"}, std::nullopt});
  for (const TenantOnDevice& on : d.tenants) {
    const slice::TenantView& t = *on.tenant;
    const slice::TenantGpuView& u = on.usage();
    const TenantMark m = mark_of(s, &t);
    const auto share = [](std::optional<double> x) { return x ? percent_text(*x) : std::string("-"); };
    rows.push_back(
        {{std::string(1, m.letter) + " " + t.name + (t.policy ? " *" : ""), std::to_string(t.processes.size()),
          slice::describe_bytes(u.used_bytes) + " / " + slice::describe_bytes(u.cap_bytes),
          std::to_string(u.compute_share) + "%", share(u.compute_used_1s), share(u.compute_used_10s)},
         m});
    for (const slice::ProcessView& p : t.processes)
      rows.push_back(
          {{"    " + std::to_string(p.pid) + " " + shown(p.comm, 16), "", slice::describe_bytes(on.process_memory(p))},
           std::nullopt});
  }
  const auto render = [&](std::size_t name_width) {
    TextTable table({Align::left, Align::right, Align::right, Align::right, Align::right, Align::right});
    for (const Row& r : rows) {
      std::vector<std::string> cells = r.cells;
      if (cells[0].size() > name_width) cells[0] = cells[0].substr(0, name_width - 1) + "~";
      table.add(cells);
    }
    return table.render(std::string(kIndent, ' '));
  };
  std::size_t name_width = 0;
  for (const Row& r : rows) name_width = std::max(name_width, r.cells[0].size());
  std::string table = render(name_width);
  std::size_t widest = 0;
  for (std::size_t at = 0, nl; (nl = table.find('\n', at)) != std::string::npos; at = nl + 1)
    widest = std::max(widest, nl - at);
  if (widest > columns) table = render(std::max<std::size_t>(8, name_width - std::min(name_width, widest - columns)));
  std::size_t row = 0;
  for (std::size_t at = 0, nl; (nl = table.find('\n', at)) != std::string::npos; at = nl + 1, ++row) {
    ScreenLine line{table.substr(at, nl - at), {}};
    if (const auto& m = rows[row].mark) line.colors.push_back({kIndent, kIndent + 1, m->color});
    out.push_back(std::move(line));
  }
  return out;
}

}  // namespace

std::vector<ScreenLine> top_view(const CoordinatorStatus& s, std::size_t columns) {
  std::vector<ScreenLine> out;
  if (s.devices.empty()) out.push_back({"no tenant has a GPU yet", {}});
  for (const DeviceStatus& d : s.devices) {
    if (!out.empty()) out.push_back({});
    for (ScreenLine& l : device_lines(s, d, columns)) out.push_back(std::move(l));
  }
  std::vector<ScreenLine> notes;
  for (const slice::TenantView& t : s.tenants) {
    if (!t.readable) continue;
    if (t.gpus.empty())
      notes.push_back({"tenant '" + t.name + "': no GPU yet, " + std::to_string(t.processes.size()) + " live process" +
                           (t.processes.size() == 1 ? "" : "es"),
                       {}});
    if (t.dead_processes > 0)
      notes.push_back({"tenant '" + t.name + "': " + dead_process_note(t.dead_processes) + " (slicectl gc)", {}});
  }
  for (const std::string& w : s.warnings) notes.push_back({"warning: " + shown(w, 200), {}});
  if (!notes.empty()) out.push_back({});
  for (ScreenLine& n : notes) out.push_back(std::move(n));
  return out;
}

}  // namespace slicectl
