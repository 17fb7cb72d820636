// libslice's log (libslice/log/log.h) end to end: the line format, level filtering, the file
// destination and its fallback, repeated lines limited, lines from threads and a forked child
// never interleaved or lost, and a line written from a static destructor at exit. Cases that need
// a process of their own (exit, standard error) run in a forked child.
#include "log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "log_repeats.h"

namespace {

using slice::LogLevel;
namespace log = slice::log;

std::string scratch(const std::string& name) {
  const char* dir = std::getenv("SLICE_TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/log_test." + std::to_string(getpid()) + "." + name;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string prefix(const char* level) { return "libslice[" + std::to_string(getpid()) + "] " + level + ": "; }

// Runs `body` in a forked child that ends with exit(0) (atexit handlers and static destructors
// run); the child's exit status.
template <typename Body>
int in_child(Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    std::exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// Set in a child before it exits: this object's destructor then logs, after libslice's own atexit
// handler has run (it was registered later than this object's destructor).
bool g_log_from_destructor = false;
struct LogsWhenDestroyed {
  ~LogsWhenDestroyed() {
    if (g_log_from_destructor) log::warn("from a static destructor");
  }
} g_logs_when_destroyed;

TEST(Log, OneLineFormatPerLevel) {
  const std::string path = scratch("format");
  log::configure(LogLevel::trace, path);
  log::error("e 1");
  log::warn("w 2");
  log::info("i 3");
  log::debug("d 4");
  log::write(LogLevel::trace, "t 5");
  log::configure(LogLevel::warn, "");
  EXPECT_EQ(lines_of(path),
            (std::vector<std::string>{prefix("error") + "e 1", prefix("warn") + "w 2", prefix("info") + "i 3",
                                      prefix("debug") + "d 4", prefix("trace") + "t 5"}));
}

TEST(Log, LevelFilters) {
  const std::map<LogLevel, std::size_t> expected_lines = {{LogLevel::off, 0},   {LogLevel::error, 1},
                                                          {LogLevel::warn, 2},  {LogLevel::info, 3},
                                                          {LogLevel::debug, 4}, {LogLevel::trace, 5}};
  for (const auto& [level, count] : expected_lines) {
    const std::string path = scratch("level" + std::to_string(static_cast<int>(level)));
    log::configure(level, path);
    for (const LogLevel l : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug, LogLevel::trace}) {
      EXPECT_EQ(log::enabled(l), static_cast<int>(l) <= static_cast<int>(level));
      log::write(l, "line");
    }
    log::configure(LogLevel::warn, "");
    EXPECT_EQ(lines_of(path).size(), count) << static_cast<int>(level);
  }
}

TEST(Log, AFileThatCannotBeOpenedFallsBackToStandardError) {
  const std::string err = scratch("stderr");
  const int status = in_child([&] {
    std::freopen(err.c_str(), "w", stderr);
    log::configure(LogLevel::warn, scratch("no-such-dir") + "/x.log");
    log::warn("still here");
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto lines = lines_of(err);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[0].starts_with("libslice[")) << lines[0];
  EXPECT_NE(lines[0].find("] error: SLICE_LOG_FILE='"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("/x.log' cannot be opened (No such file or directory); logging to standard error"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("] warn: still here"), std::string::npos) << lines[1];
}

TEST(Log, AFileIsNeverOpenedThroughALinkNorAnythingButARegularFile) {
  // Issue 29: a link planted where the log goes must not turn libslice's lines into another file.
  const std::string target = scratch("target"), link = scratch("link.log"), fifo = scratch("fifo.log");
  const std::string err = scratch("stderr-link");
  { std::ofstream(target) << "precious\n"; }
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {link, fifo}) {
    const int status = in_child([&] {
      std::freopen(err.c_str(), "w", stderr);
      log::configure(LogLevel::warn, path);
      log::warn("still here");
    });
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const auto lines = lines_of(err);
    ASSERT_EQ(lines.size(), 2u) << path;
    // A FIFO without a reader is refused by the open itself (ENXIO), one with a reader by the check.
    EXPECT_NE(lines[0].find(path == link ? "cannot be opened (a symbolic link)" : "cannot be opened ("),
              std::string::npos)
        << lines[0];
    EXPECT_NE(lines[1].find("] warn: still here"), std::string::npos) << lines[1];
  }
  EXPECT_EQ(lines_of(target), std::vector<std::string>{"precious"});
  unlink(link.c_str());
  unlink(fifo.c_str());
  unlink(target.c_str());
}

TEST(Log, RepeatedLinesAreLimitedAndCountedAtExit) {
  const std::string path = scratch("repeats");
  const int status = in_child([&] {
    log::configure(LogLevel::warn, path);
    for (int i = 0; i < 1000; ++i) log::warn("the same warning");
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), log::RepeatFilter::kBurst + 1);
  for (std::size_t i = 0; i < log::RepeatFilter::kBurst; ++i)
    EXPECT_TRUE(lines[i].ends_with("] warn: the same warning"));
  EXPECT_NE(lines.back().find("] warn: the same warning (repeated 990 more times in the last "), std::string::npos)
      << lines.back();
}

TEST(Log, ThreadsAndAForkedChildNeverInterleave) {
  const std::string path = scratch("concurrent");
  log::configure(LogLevel::info, path);
  constexpr int kThreads = 4, kLines = 250;
  const std::string padding(200, 'x');
  auto writer = [&](const char* who, int thread) {
    for (int i = 0; i < kLines; ++i)
      log::info(std::string(who) + " thread " + std::to_string(thread) + " line " + std::to_string(i) + " " + padding);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(writer, "parent", t);
  // Forked while the threads write: the child must find nothing locked, and log with its own PID.
  const pid_t child = fork();
  if (child == 0) {
    std::thread a(writer, "child", 0), b(writer, "child", 1);
    a.join();
    b.join();
    _exit(0);
  }
  for (auto& t : threads) t.join();
  int status = 0;
  waitpid(child, &status, 0);
  log::configure(LogLevel::warn, "");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  const std::regex shape(R"(libslice\[(\d+)\] info: (parent|child) thread (\d) line (\d+) x{200})");
  std::set<std::string> seen;
  std::map<std::string, int> per_writer;
  for (const std::string& line : lines_of(path)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, shape)) << line;
    const pid_t expected_pid = m[2] == "parent" ? getpid() : child;
    EXPECT_EQ(std::stoi(m[1]), expected_pid) << line;
    EXPECT_TRUE(seen.insert(line).second) << "twice: " << line;
    ++per_writer[m[2].str() + m[3].str()];
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>((kThreads + 2) * kLines));
  for (const auto& [writer_name, count] : per_writer) EXPECT_EQ(count, kLines) << writer_name;
}

TEST(Log, ALineFromAStaticDestructorAtExitIsWritten) {
  const std::string path = scratch("exit");
  const int status = in_child([&] {
    log::configure(LogLevel::warn, path);
    log::warn("before exit");
    g_log_from_destructor = true;
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "libslice[" + lines[0].substr(9, lines[0].find(']') - 9) + "] warn: from a static destructor");
}

}  // namespace
