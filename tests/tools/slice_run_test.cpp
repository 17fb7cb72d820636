// slice-run: checks its options with libslice's own parsers, sets the variables and LD_PRELOAD
// (libslice first, what was there kept after it, never twice), and execs the command.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct Result {
  int rc = -1;
  std::string out;  // standard output and error together
};

Result run(const std::string& args, const std::string& env = "") {
  const std::string cmd =
      "env -u LD_PRELOAD LIBSLICE_PATH=" PRELOAD_LIBRARY " " + env + " " SLICE_RUN " " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(SliceRun, SetsTheVariablesAndPreloadsLibslice) {
  const Result r =
      run("--memory 4Gi --compute 30 --limit 50 --priority high --tenant inference "
          "--coordinator /run/libslice -- env");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "SLICE_MEMORY_LIMIT=4Gi")) << r.out;
  EXPECT_TRUE(has_line(r.out, "SLICE_COMPUTE_SHARE=30")) << r.out;
  EXPECT_TRUE(has_line(r.out, "SLICE_COMPUTE_LIMIT=50")) << r.out;
  EXPECT_TRUE(has_line(r.out, "SLICE_PRIORITY=high")) << r.out;
  EXPECT_TRUE(has_line(r.out, "SLICE_TENANT=inference")) << r.out;
  EXPECT_TRUE(has_line(r.out, "SLICE_COORDINATOR_DIR=/run/libslice")) << r.out;
  EXPECT_TRUE(has_line(r.out, "LD_PRELOAD=" PRELOAD_LIBRARY)) << r.out;
}

TEST(SliceRun, KeepsWhatWasPreloadedAfterLibsliceAndNeverTwice) {
  const Result r = run("--memory 1Gi -- env", "LD_PRELOAD=/other/a.so:" PRELOAD_LIBRARY ":/other/b.so");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "LD_PRELOAD=" PRELOAD_LIBRARY ":/other/a.so:/other/b.so")) << r.out;
}

TEST(SliceRun, LeavesUnsetWhatWasNotAsked) {
  const Result r = run("-- env");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("SLICE_MEMORY_LIMIT="), std::string::npos) << r.out;
}

TEST(SliceRun, NamesTheTenantBeforeTheCommandRuns) {
  // Issue 26: without --tenant, a new name (the command's, its PID, random bits), set before CMD
  // runs, so that every copy of CMD's environment carries it; one given is kept.
  Result r = run("-- env");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto at = r.out.find("\nSLICE_TENANT=env-");
  EXPECT_NE(at, std::string::npos) << r.out;
  r = run("-- env", "SLICE_TENANT=given");
  EXPECT_TRUE(has_line(r.out, "SLICE_TENANT=given")) << r.out;
  r = run("--tenant chosen -- env");
  EXPECT_TRUE(has_line(r.out, "SLICE_TENANT=chosen")) << r.out;
}

TEST(SliceRun, AnInvalidVariableInTheEnvironmentIsRefusedBeforeTheCommandRuns) {
  // A container's environment, not slice-run's options: checked with libslice's parser too.
  Result r = run("-- echo ran", "SLICE_COMPUTE_SHARE=150");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("SLICE_COMPUTE_SHARE='150'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("example: SLICE_COMPUTE_SHARE="), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  r = run("-- echo ran", "SLICE_COMPUTE_SHARE=40 SLICE_MEMORY_LIMIT_1=2Gi");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has_line(r.out, "ran")) << r.out;
}

TEST(SliceRun, WrongOptionsExitTwoNamingOptionValueAndExample) {
  struct Case {
    std::string args, expected;
  } cases[] = {
      {"--memory 12X -- true", "--memory '12X' is not valid"},
      {"--memory 0 -- true", "example: --memory 4Gi"},
      {"--compute 101 -- true", "--compute '101' is not valid"},
      {"--limit 0 -- true", "example: --limit 50"},
      {"--priority urgent -- true", "--priority 'urgent' is not valid"},
      {"--tenant .hidden -- true", "--tenant '.hidden' is not valid"},
      {"--coordinator relative/dir -- true", "--coordinator 'relative/dir' is not valid"},
      {"--bogus 1 -- true", "unknown option '--bogus'"},
      {"--memory", "--memory needs a value"},
      {"--memory 4Gi", "which command?"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expected), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("usage: slice-run"), std::string::npos) << c.args;
  }
}

TEST(SliceRun, MissingLibraryAndMissingCommand) {
  const Result missing = run("-- true", "LIBSLICE_PATH=/nowhere/libslice.so");
  EXPECT_EQ(missing.rc, 1) << missing.out;
  EXPECT_NE(missing.out.find("libslice.so not found at '/nowhere/libslice.so'"), std::string::npos) << missing.out;
  const Result no_cmd = run("-- /nowhere/no-such-command");
  EXPECT_EQ(no_cmd.rc, 127) << no_cmd.out;
  EXPECT_NE(no_cmd.out.find("cannot run '/nowhere/no-such-command'"), std::string::npos) << no_cmd.out;
}

TEST(SliceRun, HelpListsEveryOptionAndTheVariables) {
  const Result r = run("--help");
  ASSERT_EQ(r.rc, 0);
  for (const char* word : {"--memory", "--compute", "--limit", "--priority", "--tenant", "--coordinator",
                           "SLICE_MEMORY_LIMIT", "SLICE_LOG_LEVEL", "SLICE_DISABLE"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
}

}  // namespace
