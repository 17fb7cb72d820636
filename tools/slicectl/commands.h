// The slicectl subcommands. Each takes the arguments after its own name, writes its result to
// standard output, and returns the exit code or throws CommandError.
#pragma once

#include <string>
#include <vector>

namespace slicectl {

int run_status(std::vector<std::string> args);
int run_set(std::vector<std::string> args);
int run_gc(std::vector<std::string> args);
int run_rm(std::vector<std::string> args);
int run_usage(std::vector<std::string> args);
int run_top(std::vector<std::string> args);
int run_metrics(std::vector<std::string> args);
int run_archive(std::vector<std::string> args);
int run_prepare(std::vector<std::string> args);

}  // namespace slicectl
