// slicectl: the administrator's view of libslice (status, top, metrics, usage), its limits (set,
// prepare), its repairs (gc, rm) and its archive (archive). This file only dispatches
// (kSubcommands); each subcommand has its own file and its help in help_text.cpp.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "printable.h"
#include "help_text.h"

namespace {

using slicectl::CommandError;

struct Subcommand {
  std::string_view name;
  int (*run)(std::vector<std::string>);
};

constexpr Subcommand kSubcommands[] = {
    {"status", slicectl::run_status},   {"set", slicectl::run_set},         {"gc", slicectl::run_gc},
    {"rm", slicectl::run_rm},           {"usage", slicectl::run_usage},     {"top", slicectl::run_top},
    {"metrics", slicectl::run_metrics}, {"archive", slicectl::run_archive}, {"prepare", slicectl::run_prepare},
};

bool is_help(std::string_view a) { return a == "--help" || a == "-h"; }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> all(argv + 1, argv + argc);
  // --coordinator may also come before the subcommand: it is handed to the subcommand.
  std::vector<std::string> leading;
  while (!all.empty() && all.front().rfind("--coordinator", 0) == 0) {
    const bool joined = all.front().find('=') != std::string::npos;
    const std::size_t n = joined || all.size() < 2 ? 1 : 2;
    leading.insert(leading.end(), all.begin(), all.begin() + n);
    all.erase(all.begin(), all.begin() + n);
  }
  if (all.empty()) {
    std::fputs("slicectl: a subcommand is needed\n", stderr);
    std::fputs(slicectl::kMainUsage, stderr);
    return slicectl::kExitUsage;
  }
  const std::string first = all.front();
  if (is_help(first) || first == "help") {
    std::fputs(all.size() > 1 && first == "help" ? slicectl::usage_of(all[1]) : slicectl::kMainUsage, stdout);
    return slicectl::kExitOk;
  }
  for (const Subcommand& sub : kSubcommands) {
    if (sub.name != first) continue;
    std::vector<std::string> args(all.begin() + 1, all.end());
    args.insert(args.end(), leading.begin(), leading.end());
    for (const std::string& a : args) {
      if (!is_help(a)) continue;
      std::fputs(slicectl::usage_of(sub.name), stdout);
      return slicectl::kExitOk;
    }
    try {
      return sub.run(std::move(args));
    } catch (const CommandError& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "slicectl %s: %s\n", std::string(sub.name).c_str(), e.message.c_str());
      if (e.show_usage) std::fputs(slicectl::usage_of(sub.name), stderr);
      return e.exit_code;
    }
  }
  const bool option = !first.empty() && first.front() == '-';
  std::fprintf(stderr, "slicectl: unknown %s '%s'\n", option ? "option" : "subcommand",
               slice::printable(first).c_str());
  std::fputs(slicectl::kMainUsage, stderr);
  return slicectl::kExitUsage;
}
