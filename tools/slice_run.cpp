// slice-run: runs a command with libslice preloaded and its limits set, e.g.
//   slice-run --memory 4Gi --compute 30 -- python3 serve.py
// Every option is checked with the same parsers libslice uses (a wrong value is an error naming
// the option, the value and a valid example; exit 2); then the SLICE_* variables and LD_PRELOAD
// (libslice.so first, what was there kept after it) are set and the command is exec'd.
// The tenant is decided here, before CMD runs (issue 26): --tenant, else SLICE_TENANT, else the tenant
// of the nearest member in slice-run's own lineage (libslice/coordinator/lineage.h: slice-run started
// by a sliced program stays in its slice), else a new name; CMD and every process it starts inherit it.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "config.h"
#include "config_values.h"
#include "lineage.h"
#include "printable.h"
#include "quantity.h"
#include "variables_doc.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;

const char kUsage[] =
    "usage: slice-run [--memory Q] [--compute P] [--limit P] [--priority high|normal|low]\n"
    "                 [--tenant NAME] [--coordinator DIR] -- CMD [ARG...]\n"
    "Runs CMD with libslice preloaded (LD_PRELOAD, keeping what was there) and its limits set.\n"
    "\n"
    "  --memory Q        SLICE_MEMORY_LIMIT: VRAM cap on every GPU (4Gi, 512Mi, 1.5Gi, 4G, 25%)\n"
    "  --compute P       SLICE_COMPUTE_SHARE: percent of GPU time guaranteed under contention (1-100)\n"
    "  --limit P         SLICE_COMPUTE_LIMIT: hard ceiling, percent of GPU time (1-100)\n"
    "  --priority W      SLICE_PRIORITY: high, normal or low\n"
    "  --tenant NAME     SLICE_TENANT: the budget to join (default: SLICE_TENANT, else the slice of the\n"
    "                    sliced program that started slice-run, else a new one; CMD's children share it)\n"
    "  --coordinator DIR SLICE_COORDINATOR_DIR: the coordinator folder (an absolute path)\n"
    "  --help            this text\n"
    "\n"
    "libslice.so is looked for where LIBSLICE_PATH says, else beside this program: where the installed\n"
    "layout puts it (" SLICE_INSTALLED_LIBRARY
    "), then ../lib/libslice.so (the build folder).\n"
    "Exit status: CMD's own; 2 for a wrong command line or an invalid SLICE_* variable in the\n"
    "environment, 1 when libslice.so is missing, 127 when CMD cannot be run.\n\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "slice-run: %s\n%s", message.c_str(), kUsage);
  std::exit(kExitUsage);
}

template <class Result>
void check(const char* option, const std::string& value, const Result& r, const char* example) {
  if (!r)
    usage_error(std::string(option) + " '" + slice::printable(value) + "' is not valid: " + r.reason +
                "; example: " + option + " " + example);
}

// The library to preload: LIBSLICE_PATH when set; otherwise the first that exists, relative to
// this program, of the installed layout's private folder (SLICE_INSTALLED_LIBRARY, from
// GNUInstallDirs: ../lib/libslice/libslice.so, or ../lib/<multiarch>/libslice/libslice.so) and the
// build folder's ../lib/libslice.so (also bin/ and lib/ copied side by side). `tried` says where
// it looked, for the error when none is there.
std::string libslice_path(std::string& tried) {
  if (const char* p = std::getenv("LIBSLICE_PATH"); p && *p) {
    tried = "'" + slice::printable(p, 300) + "'";
    return p;
  }
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string dir(self, static_cast<std::size_t>(n));
  dir = dir.substr(0, dir.rfind('/'));
  for (const char* relative : {SLICE_INSTALLED_LIBRARY, "../lib/libslice.so"}) {
    const std::string candidate = dir + "/" + relative;
    if (access(candidate.c_str(), R_OK) == 0) {
      char resolved[PATH_MAX];  // /usr/lib/libslice/libslice.so rather than /usr/bin/../lib/...
      return realpath(candidate.c_str(), resolved) ? std::string(resolved) : candidate;
    }
    tried += (tried.empty() ? "'" : " or '") + slice::printable(candidate, 300) + "'";
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  struct Setting {
    const char* variable;
    std::string value;
  };
  std::vector<Setting> settings;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::fputs(slice::variables_help_text().c_str(), stdout);
      return 0;
    }
    if (arg.rfind("--", 0) != 0) break;  // the command starts here (the "--" is optional)
    if (i + 1 >= argc) usage_error(arg + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--memory") {
      check("--memory", value, slice::parse_memory_limit(value), "4Gi");
      settings.push_back({"SLICE_MEMORY_LIMIT", value});
    } else if (arg == "--compute") {
      check("--compute", value, slice::parse_percent(value), "30");
      settings.push_back({"SLICE_COMPUTE_SHARE", value});
    } else if (arg == "--limit") {
      check("--limit", value, slice::parse_percent(value), "50");
      settings.push_back({"SLICE_COMPUTE_LIMIT", value});
    } else if (arg == "--priority") {
      check("--priority", value, slice::parse_priority(value), "high");
      settings.push_back({"SLICE_PRIORITY", value});
    } else if (arg == "--tenant") {
      check("--tenant", value, slice::parse_tenant_name(value), "inference");
      settings.push_back({"SLICE_TENANT", value});
    } else if (arg == "--coordinator") {
      check("--coordinator", value, slice::parse_directory(value), SLICE_DEFAULT_COORDINATOR_DIR);
      settings.push_back({"SLICE_COORDINATOR_DIR", value});
    } else {
      usage_error("unknown option '" + slice::printable(arg) + "'");
    }
  }
  if (i >= argc) usage_error("which command? example: slice-run --memory 4Gi -- python3 serve.py");

  std::string tried;
  const std::string library = libslice_path(tried);
  if (library.empty() || access(library.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "slice-run: libslice.so not found at %s (build it, or set LIBSLICE_PATH)\n", tried.c_str());
    return kExitFailure;
  }
  for (const Setting& s : settings) setenv(s.variable, s.value.c_str(), 1);
  if (const char* t = std::getenv("SLICE_TENANT"); t == nullptr || *t == '\0') {
    const char* d = std::getenv("SLICE_COORDINATOR_DIR");
    const std::string dir = d != nullptr && *d != '\0' ? d : SLICE_DEFAULT_COORDINATOR_DIR;
    const std::optional<std::string> inherited = slice::inherited_tenant(dir);
    const std::string program = argv[i];
    setenv("SLICE_TENANT",
           (inherited ? *inherited : slice::new_tenant_name(program.substr(program.rfind('/') + 1))).c_str(), 1);
  }
  // The SLICE_* variables CMD inherits (a container's environment, say) are checked too: libslice
  // would refuse them at the first CUDA call, which is later and further from whoever set them.
  if (const slice::ConfigResult config = slice::parse_config(slice::process_slice_environment()); !config) {
    std::fprintf(stderr, "slice-run: %s\n", config.error.message().c_str());
    return kExitUsage;
  }
  std::string preload = library;
  if (const char* old = std::getenv("LD_PRELOAD"); old && *old) {
    // Keep what was there, after us; libslice once is enough.
    std::string rest;
    std::string list = old;
    for (std::size_t pos = 0; pos <= list.size();) {
      std::size_t end = list.find_first_of(": ", pos);
      if (end == std::string::npos) end = list.size();
      const std::string item = list.substr(pos, end - pos);
      if (!item.empty() && item != library) rest += ":" + item;
      pos = end + 1;
    }
    preload += rest;
  }
  setenv("LD_PRELOAD", preload.c_str(), 1);
  execvp(argv[i], argv + i);
  std::fprintf(stderr, "slice-run: cannot run '%s': %s\n", slice::printable(argv[i]).c_str(), std::strerror(errno));
  return 127;
}
