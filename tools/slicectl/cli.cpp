#include "cli.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "config.h"
#include "config_values.h"
#include "printable.h"
#include "usage_archive.h"

namespace slicectl {

void fail(std::string message) { throw CommandError{kExitFailure, std::move(message), false}; }

void usage_error(std::string message) { throw CommandError{kExitUsage, std::move(message), true}; }

void invalid_option(std::string_view option, std::string_view value, std::string_view reason,
                    std::string_view example) {
  throw CommandError{kExitUsage,
                     std::string(option) + " '" + slice::printable(value) + "' is not valid: " + std::string(reason) +
                         "; example: " + std::string(option) + " " + std::string(example),
                     false};
}

void check_tenant_argument(const std::string& tenant, std::string_view example) {
  if (auto name = slice::parse_tenant_name(tenant); !name)
    throw CommandError{kExitUsage,
                       "tenant '" + slice::printable(tenant) + "' is not a valid name: " + name.reason +
                           "; example: " + std::string(example),
                       false};
}

void unknown_option(const std::string& arg) {
  if (!arg.empty() && arg[0] == '-') usage_error("unknown option '" + slice::printable(arg) + "'");
  usage_error("unexpected argument '" + slice::printable(arg) + "'");
}

bool ArgReader::flag(std::string_view name) {
  if (done() || peek() != name) return false;
  ++next_;
  return true;
}

bool ArgReader::option(std::string_view name, std::string& value) {
  if (done()) return false;
  const std::string& a = peek();
  if (a == name) {
    ++next_;
    if (done()) usage_error(std::string(name) + " needs a value");
    value = take();
    return true;
  }
  if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
    value = a.substr(name.size() + 1);
    ++next_;
    return true;
  }
  return false;
}

CommonOptions::CommonOptions() {
  // The defaults are libslice's own, so that the tools look where its processes do.
  const slice::Config defaults;
  const char* env = std::getenv("SLICE_COORDINATOR_DIR");
  coordinator = env && *env ? env : defaults.coordinator_dir;
  env = std::getenv("SLICE_POLICY_DIR");
  policy_dir = env && *env ? env : defaults.policy_dir;
}

bool CommonOptions::read(ArgReader& args) {
  std::string value;
  if (args.option("--coordinator", value)) {
    if (value.empty()) invalid_option("--coordinator", value, "an empty path", SLICE_DEFAULT_COORDINATOR_DIR);
    coordinator = value;
    return true;
  }
  if (args.option("--policy-dir", value)) {
    if (value.empty() || value[0] != '/')
      invalid_option("--policy-dir", value, "not an absolute path", SLICE_DEFAULT_POLICY_DIR);
    policy_dir = value;
    return true;
  }
  return false;
}

ArchiveOption::ArchiveOption() {
  const char* env = std::getenv("SLICECTL_ARCHIVE");
  path = env && *env ? env : kDefaultArchive;
}

bool ArchiveOption::read(ArgReader& args) {
  std::string value;
  if (!args.option("--archive", value)) return false;
  if (value.empty()) invalid_option("--archive", value, "an empty path", kDefaultArchive);
  path = value;
  return true;
}

void require_coordinator(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT)
      fail("no coordinator at " + slice::printable(dir, 256) + ": no libslice process has run with it");
    fail("cannot use " + slice::printable(dir, 256) + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) fail("no coordinator at " + slice::printable(dir, 256) + ": it is not a directory");
  const std::string tenants = dir + "/tenants";
  if (stat(tenants.c_str(), &st) != 0 && errno == ENOENT)
    fail("no coordinator at " + slice::printable(dir, 256) +
         ": no libslice process has run with it (it has no tenants/ folder)");
}

std::string shown(std::string_view text, std::size_t max_bytes) { return slice::printable(text, max_bytes); }

}  // namespace slicectl
