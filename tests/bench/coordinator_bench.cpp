// Benchmarks of the coordinator (issue 3): the cost of a reservation, of joining, of 256 processes
// joining at once, and the time from a SIGKILL to the dead process's memory being usable again.
// Prints figures; asserts nothing. Run through scripts/bench.sh (it gives it a coordinator folder).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "coordinator.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kGiB = 1ull << 30;

std::string g_dir;

double since_ns(Clock::time_point t0) { return std::chrono::duration<double, std::nano>(Clock::now() - t0).count(); }

std::unique_ptr<slice::Coordinator> join(const std::string& tenant, std::uint64_t cap) {
  slice::JoinRequest r;
  r.dir = g_dir;
  if (const char* policies = std::getenv("SLICE_POLICY_DIR")) r.policy_dir = policies;
  r.tenant = tenant;
  slice::DeviceInfo d;
  for (int i = 0; i < 16; ++i) d.uuid[i] = static_cast<std::uint8_t>(0xB0 + i);
  d.name = "bench GPU";
  d.total_bytes = 24 * kGiB;
  if (cap != slice::kNoLimit) d.memory = slice::MemoryLimit::of_bytes(cap);
  r.devices.push_back(d);
  std::string error;
  std::vector<std::string> warnings;
  auto c = slice::Coordinator::join(r, error, warnings);
  if (!c) {
    std::fprintf(stderr, "coordinator_bench: join failed: %s\n", error.c_str());
    std::exit(1);
  }
  return c;
}

// ns per reserve+release pair of 4 KiB, over `pairs` pairs.
double pair_cost(slice::Coordinator& c, int pairs) {
  const auto t0 = Clock::now();
  for (int i = 0; i < pairs; ++i) {
    if (!c.reserve(0, 4096)) std::exit(3);
    c.release(0, 4096);
  }
  return since_ns(t0) / pairs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench_pairs() {
  auto c = join("bench-pairs", 16 * kGiB);
  std::vector<double> alone;
  for (int r = 0; r < 7; ++r) alone.push_back(pair_cost(*c, 200000));
  // Two processes on one tenant, at the same time: the child measures too and reports by pipe.
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  std::vector<double> both;
  for (int r = 0; r < 5; ++r) {
    pid_t child = fork();
    if (child == 0) {
      auto mine = join("bench-pairs", 16 * kGiB);
      double ns = pair_cost(*mine, 200000);
      if (write(fds[1], &ns, sizeof ns) != sizeof ns) _exit(1);
      mine.reset();
      _exit(0);
    }
    double parent_ns = pair_cost(*c, 200000), child_ns = 0;
    if (read(fds[0], &child_ns, sizeof child_ns) != sizeof child_ns) std::exit(1);
    waitpid(child, nullptr, 0);
    both.push_back((parent_ns + child_ns) / 2);
  }
  close(fds[0]);
  close(fds[1]);
  std::printf("  %-52s %10.0f ns\n", "reserve + release, 1 process", median(alone));
  std::printf("  %-52s %10.0f ns\n", "reserve + release, 2 processes on one tenant", median(both));
}

void bench_join() {
  // One process joining (a fresh process, as libslice joins at its first CUDA call).
  std::vector<double> one;
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  for (int r = 0; r < 9; ++r) {
    pid_t child = fork();
    if (child == 0) {
      const auto t0 = Clock::now();
      auto c = join("bench-join", slice::kNoLimit);
      double ns = since_ns(t0);
      if (write(fds[1], &ns, sizeof ns) != sizeof ns) _exit(1);
      _exit(0);
    }
    double ns = 0;
    if (read(fds[0], &ns, sizeof ns) != sizeof ns) std::exit(1);
    waitpid(child, nullptr, 0);
    one.push_back(ns);
  }
  close(fds[0]);
  close(fds[1]);
  std::printf("  %-52s %10.1f us\n", "join (register one process)", median(one) / 1000);

  // 256 processes at once: until all have joined, against the same 256 processes not joining.
  auto spawn_all = [](bool do_join) {
    int ready[2];
    if (pipe(ready) != 0) std::exit(1);
    const auto t0 = Clock::now();
    std::vector<pid_t> kids;
    for (int i = 0; i < 256; ++i) {
      pid_t p = fork();
      if (p == 0) {
        std::unique_ptr<slice::Coordinator> c;
        if (do_join) c = join("bench-crowd", slice::kNoLimit);
        char b = 1;
        if (write(ready[1], &b, 1) != 1) _exit(1);
        pause();
        _exit(0);
      }
      kids.push_back(p);
    }
    for (int n = 0; n < 256; ++n) {
      char b;
      if (read(ready[0], &b, 1) != 1) std::exit(1);
    }
    const double ns = since_ns(t0);
    for (pid_t p : kids) kill(p, SIGKILL);
    for (pid_t p : kids) waitpid(p, nullptr, 0);
    close(ready[0]);
    close(ready[1]);
    return ns;
  };
  std::vector<double> with, without;
  for (int r = 0; r < 3; ++r) {
    without.push_back(spawn_all(false));
    with.push_back(spawn_all(true));
  }
  std::printf("  %-52s %10.1f ms (%.1f ms without joining)\n", "256 processes started at once, until all joined",
              median(with) / 1e6, median(without) / 1e6);
}

void bench_reap() {
  // A holder takes the whole cap and is killed; a survivor asks for all of it until it gets it.
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    int fds[2];
    if (pipe(fds) != 0) std::exit(1);
    pid_t holder = fork();
    if (holder == 0) {
      auto c = join("bench-reap", 4 * kGiB);
      if (!c->reserve(0, 4 * kGiB)) _exit(2);
      char b = 1;
      if (write(fds[1], &b, 1) != 1) _exit(1);
      pause();
      _exit(0);
    }
    char b;
    if (read(fds[0], &b, 1) != 1) std::exit(1);
    auto survivor = join("bench-reap", 4 * kGiB);
    const auto t0 = Clock::now();
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
    while (!survivor->reserve(0, 4 * kGiB)) {
    }
    times.push_back(since_ns(t0));
    survivor->release(0, 4 * kGiB);
    close(fds[0]);
    close(fds[1]);
  }
  std::printf("  %-52s %10.1f us\n", "SIGKILL of a holder until its memory is taken again", median(times) / 1000);
}

}  // namespace

int main() {
  const char* dir = std::getenv("SLICE_COORDINATOR_DIR");
  if (!dir || !*dir) {
    std::fprintf(stderr, "coordinator_bench: set SLICE_COORDINATOR_DIR to a scratch folder (scripts/bench.sh does)\n");
    return 2;
  }
  g_dir = dir;
  std::printf("coordinator (median of several rounds)\n");
  bench_pairs();
  bench_join();
  bench_reap();
  return 0;
}
