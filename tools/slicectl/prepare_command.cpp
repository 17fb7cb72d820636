// slicectl prepare: what a machine needs before its first libslice process, run as root at boot
// (libslice-prepare.service): the coordinator folder (shared and sticky), the persistent policy
// folder, and for every tenant a policy manages its live file, root's and writable by the policy's
// group. Without that file a managed tenant's processes refuse to start (they may not make it
// themselves: they could then delete it and start again from zero usage).
#include <unistd.h>

#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "policy.h"

namespace slicectl {

int run_prepare(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  while (!args.done()) {
    if (!common.read(args)) unknown_option(args.peek());
  }
  if (geteuid() != 0) fail("only root may prepare the machine: the folders and tenant files it makes are root's");
  std::vector<std::string> done, problems;
  std::string error;
  if (!slice::prepare_machine(common.coordinator, common.policy_dir, done, problems, error)) fail(error);
  std::printf("coordinator %s and policy folder %s ready\n", shown(common.coordinator, 200).c_str(),
              shown(common.policy_dir, 200).c_str());
  for (const std::string& line : done) std::printf("%s\n", line.c_str());  // tenant names and numbers only
  for (const std::string& p : problems) std::fprintf(stderr, "slicectl prepare: warning: %s\n", shown(p, 300).c_str());
  return kExitOk;
}

}  // namespace slicectl
