// slicectl gc [TENANT]: reaps dead processes now (libslice also does it by itself when a tenant
// next needs the memory), and says how many per tenant.
#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "config_values.h"
#include "coordinator_view.h"
#include "printable.h"

namespace slicectl {

namespace {
// Reaping writes a tenant's file through a shared mapping. The tenant may write that file too, and
// if it truncates it meanwhile, touching the mapping raises SIGBUS: report that tenant and go on
// with the others instead of dying. (The recount flag or slot left mid-way is ours: the kernel
// drops our locks when slicectl exits, and others then see us dead.)
sigjmp_buf g_fault;
void on_sigbus(int) { siglongjmp(g_fault, 1); }

int reap_guarded(const std::string& dir, const std::string& tenant, std::string& error) {
  struct sigaction sa {}, old {};
  sa.sa_handler = on_sigbus;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &old);
  int reaped;
  if (sigsetjmp(g_fault, 1) == 0) {
    reaped = slice::reap_tenant(dir, tenant, error);
  } else {
    error = "its file changed size while it was being reaped (truncated by its tenant?): skipped";
    reaped = -1;
  }
  sigaction(SIGBUS, &old, nullptr);
  return reaped;
}
}  // namespace

int run_gc(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  std::string only;
  while (!args.done()) {
    if (common.read(args)) continue;
    if (!args.peek().empty() && args.peek()[0] != '-' && only.empty()) only = args.take();
    else unknown_option(args.peek());
  }
  if (!only.empty()) {
    if (auto name = slice::parse_tenant_name(only); !name)
      throw CommandError{kExitUsage,
                         "tenant '" + slice::printable(only) + "' is not a valid name: " + name.reason +
                             "; example: slicectl gc team-a",
                         false};
  }
  const std::string& dir = common.coordinator;
  require_coordinator(dir);

  std::vector<std::string> tenants;
  if (!only.empty()) {
    struct stat st {};
    if (stat((dir + "/tenants/" + only).c_str(), &st) != 0)
      fail("no tenant '" + only + "' at " + slice::printable(dir, 200));
    tenants.push_back(only);
  } else {
    std::string error;
    for (const slice::TenantView& t : slice::read_coordinator(dir, error)) tenants.push_back(t.name);
    if (!error.empty()) fail(error);
    if (tenants.empty()) std::printf("no tenants at %s\n", shown(dir, 200).c_str());
  }

  int rc = kExitOk;
  for (const std::string& t : tenants) {
    std::string error;
    const int reaped = reap_guarded(dir, t, error);
    if (reaped < 0) {
      std::fflush(stdout);
      std::fprintf(stderr, "slicectl gc: tenant '%s': %s\n", t.c_str(), error.c_str());
      rc = kExitFailure;
      continue;
    }
    std::printf("tenant '%s': %d dead process%s reaped\n", t.c_str(), reaped, reaped == 1 ? "" : "es");
  }
  return rc;
}

}  // namespace slicectl
