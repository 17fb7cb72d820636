// What every slicectl subcommand shares: exit codes, errors, reading options, and finding the
// coordinator directory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace slicectl {

constexpr int kExitOk = 0;       // done
constexpr int kExitFailure = 1;  // could not be done (no coordinator, not root, a file unreadable)
constexpr int kExitUsage = 2;    // the command line is wrong

// Thrown by a subcommand and turned into one "slicectl SUBCOMMAND: ..." line and the exit code by main.
struct CommandError {
  int exit_code = kExitFailure;
  std::string message;
  bool show_usage = false;  // print the subcommand's usage after the message
};

[[noreturn]] void fail(std::string message);         // exit 1
[[noreturn]] void usage_error(std::string message);  // exit 2, with usage

// "--memory '12X' is not valid: unknown unit 'X'; example: --memory 4Gi" (exit 2). The value is
// shown with odd bytes escaped.
[[noreturn]] void invalid_option(std::string_view option, std::string_view value, std::string_view reason,
                                 std::string_view example);

// The arguments of one subcommand, read left to right. An option's value is the next argument or
// follows '=' (--memory 4Gi, --memory=4Gi).
class ArgReader {
 public:
  explicit ArgReader(std::vector<std::string> args) : args_(std::move(args)) {}
  bool done() const { return next_ >= args_.size(); }
  const std::string& peek() const { return args_[next_]; }
  std::string take() { return args_[next_++]; }
  // True if the next argument is `name` (nothing else); consumes it.
  bool flag(std::string_view name);
  // True if the next argument is `name` or `name=VALUE`; consumes it and its value. A missing
  // value is a usage error.
  bool option(std::string_view name, std::string& value);

 private:
  std::vector<std::string> args_;
  std::size_t next_ = 0;
};

// Reads the options every subcommand takes (--coordinator DIR, --policy-dir DIR; --help is the
// caller's). Returns true if it consumed the next argument.
struct CommonOptions {
  std::string coordinator;  // $SLICE_COORDINATOR_DIR, else libslice's default, unless --coordinator
  std::string policy_dir;   // $SLICE_POLICY_DIR, else libslice's default, unless --policy-dir
  CommonOptions();
  bool read(ArgReader& args);
};

// --archive FILE, for the subcommands that read or write the usage archive (usage_archive.h):
// default $SLICECTL_ARCHIVE, else /var/lib/libslice/usage.sqlite3.
struct ArchiveOption {
  std::string path;
  ArchiveOption();
  bool read(ArgReader& args);
};

// A TENANT argument: "tenant 'x/y' is not a valid name: ...; example: EXAMPLE" (exit 2) unless it
// is one. `example` is a whole valid command line, such as "slicectl gc team-a".
void check_tenant_argument(const std::string& tenant, std::string_view example);

// An argument that starts with '-' and that no option took: "unknown option" (exit 2).
[[noreturn]] void unknown_option(const std::string& arg);

// Fails (exit 1) with a message saying why `dir` holds no coordinator that can be read: missing,
// not a directory, or no tenants/ folder yet.
void require_coordinator(const std::string& dir);

// Text from a tenant's own file (device names, command names) made safe for one terminal line.
std::string shown(std::string_view text, std::size_t max_bytes = 40);

}  // namespace slicectl
