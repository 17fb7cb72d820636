// slicectl status [--json]: reads the coordinator and prints it as a table or as JSON.
#include "cli.h"
#include "commands.h"
#include "status_model.h"

namespace slicectl {

int run_status(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  bool json = false;
  while (!args.done()) {
    if (args.flag("--json"))
      json = true;
    else if (!common.read(args))
      unknown_option(args.peek());
  }
  const CoordinatorStatus status = read_status(common.coordinator, common.policy_dir);
  if (json)
    print_status_json(status);
  else
    print_status_table(status);
  return kExitOk;
}

}  // namespace slicectl
