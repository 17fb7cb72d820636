// Multi-process behaviour of the simulated GPU, measured against its own ground truth: processes
// busy with spin kernels share the device's time equally, the device stays fully used, and a process
// killed at any moment neither wedges the device nor keeps its memory.
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "machine_state.h"

namespace {

using namespace std::chrono_literals;

struct Worker {
  pid_t pid = -1;
  int out = -1;  // its standard output
};

Worker spawn(std::vector<std::string> args) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    std::string exe = SPIN_WORKER;
    argv.push_back(exe.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  return {pid, fds[0]};
}

bool wait_ready(const Worker& w, int timeout_ms = 10000) {
  pollfd p{w.out, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  char buf[16] = {};
  return read(w.out, buf, sizeof buf - 1) > 0 && std::string(buf).rfind("ready", 0) == 0;
}

int finish(Worker& w) {
  int status = 0;
  waitpid(w.pid, &status, 0);
  close(w.out);
  return status;
}

void kill_and_reap(Worker& w) {
  kill(w.pid, SIGKILL);
  finish(w);
}

simgpu::Machine& machine() {
  static simgpu::Machine* m = [] {
    simgpu::MachineConfig config;
    std::string error;
    EXPECT_TRUE(simgpu::read_machine_config(config, error)) << error;
    simgpu::Machine* attached = simgpu::Machine::attach(config, error);
    EXPECT_NE(attached, nullptr) << error;
    return attached;
  }();
  return *m;
}

std::uint64_t busy_of(pid_t pid) {
  for (auto& s : machine().state().slots)
    if (s.pid.load() == pid) return s.dev[0].busy_ns.load();
  return 0;
}

// Runs n workers with kernels of kernel_us and returns each one's share of a 2 s window.
std::vector<double> measure_shares(int n, unsigned kernel_us) {
  std::vector<Worker> workers;
  for (int i = 0; i < n; ++i) workers.push_back(spawn({"--seconds", "3.5", "--kernel-us", std::to_string(kernel_us)}));
  for (auto& w : workers) EXPECT_TRUE(wait_ready(w));
  std::this_thread::sleep_for(500ms);
  std::vector<std::uint64_t> before;
  for (auto& w : workers) before.push_back(busy_of(w.pid));
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(2s);
  std::vector<double> shares;
  const double window = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e9;
  for (std::size_t i = 0; i < workers.size(); ++i)
    shares.push_back(static_cast<double>(busy_of(workers[i].pid) - before[i]) / window);
  for (auto& w : workers) EXPECT_EQ(finish(w), 0);
  return shares;
}

void expect_fair(const std::vector<double>& shares) {
  const double target = 1.0 / static_cast<double>(shares.size());
  double total = 0;
  std::printf("shares of device time:");
  for (double s : shares) std::printf(" %.3f", s);
  std::printf("\n");
  for (double s : shares) {
    EXPECT_NEAR(s, target, 0.10) << "a process's share of device time";
    total += s;
  }
  EXPECT_GE(total, 0.90) << "the device idles while processes have work";
  EXPECT_LE(total, 1.02) << "more device time handed out than exists";
}

class SharingByKernelLength : public ::testing::TestWithParam<unsigned> {};

TEST_P(SharingByKernelLength, TwoBusyProcessesGetHalfEach) { expect_fair(measure_shares(2, GetParam())); }

INSTANTIATE_TEST_SUITE_P(KernelLengths, SharingByKernelLength, ::testing::Values(100u, 1000u, 10000u),
                         [](const auto& info) { return std::to_string(info.param) + "us"; });

TEST(Sharing, ThreeBusyProcessesGetAThirdEach) { expect_fair(measure_shares(3, 1000)); }

TEST(Sharing, KilledHolderFreesDeviceAndMemoryWithinASecond) {
  // A holds 8 GiB and long kernels; B waits for the device. Killing A mid-kernel must hand the
  // device to B and give A's memory back within a second.
  Worker a = spawn({"--seconds", "30", "--kernel-us", "20000", "--alloc-mib", "8192"});
  ASSERT_TRUE(wait_ready(a));
  Worker b = spawn({"--seconds", "4", "--kernel-us", "1000"});
  ASSERT_TRUE(wait_ready(b));
  std::this_thread::sleep_for(300ms);
  std::uint64_t free_b = 0, total = 0;
  machine().memory_info(0, free_b, total);
  EXPECT_LE(free_b, total - (8ull << 30));
  const std::uint64_t b_before = busy_of(b.pid);
  const auto killed_at = std::chrono::steady_clock::now();
  kill_and_reap(a);
  // B must make progress on the device again, and A's memory come back, within a second.
  bool progressed = false, returned = false;
  while (std::chrono::steady_clock::now() - killed_at < 1s && !(progressed && returned)) {
    std::this_thread::sleep_for(20ms);
    progressed = progressed || busy_of(b.pid) > b_before + 50'000'000ull;
    machine().reap_dead_slots();
    machine().memory_info(0, free_b, total);
    returned = free_b == total;
  }
  EXPECT_TRUE(progressed) << "the device stayed with the dead process";
  EXPECT_TRUE(returned) << "the dead process's memory was not returned";
  EXPECT_EQ(finish(b), 0);
}

TEST(Sharing, RandomKillsNeverLeakMemoryOrWedgeTheDevice) {
  // Each victim keeps kernels queued and churns allocations on a second thread, so kills land
  // mid-kernel, mid-allocation and inside the memory lock; a survivor keeps using the device.
  std::mt19937 rng(12345);
  Worker survivor = spawn({"--seconds", "30", "--kernel-us", "500", "--alloc-mib", "1024", "--churn", "1"});
  ASSERT_TRUE(wait_ready(survivor));
  for (int round = 0; round < 20; ++round) {
    Worker w = spawn({"--seconds", "30", "--kernel-us", std::to_string(100 + rng() % 5000), "--alloc-mib",
                      std::to_string(1 + rng() % 4096), "--churn", "1"});
    ASSERT_TRUE(wait_ready(w));
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50'000));
    kill_and_reap(w);
  }
  std::printf("memory-lock recoveries after a holder died: %llu\n",
              static_cast<unsigned long long>(machine().state().devices[0].lock_recoveries.load()));
  // The survivor's own memory is what the device reports in use: nothing of the dead remains.
  machine().reap_dead_slots();
  std::uint64_t free_b = 0, total = 0;
  machine().memory_info(0, free_b, total);
  std::uint64_t survivor_bytes = 0;
  for (auto& s : machine().state().slots)
    if (s.pid.load() == survivor.pid) survivor_bytes = s.dev[0].memory_bytes.load();
  EXPECT_GE(survivor_bytes, 1024ull << 20);
  // Its churn thread holds at most one 4 KiB block, which may come or go between the two readings.
  EXPECT_NEAR(static_cast<double>(total - free_b), static_cast<double>(survivor_bytes), 4096.0);
  kill_and_reap(survivor);
  machine().reap_dead_slots();
  machine().memory_info(0, free_b, total);
  EXPECT_EQ(free_b, total);
  // And the device still runs work for a newcomer, all of it.
  Worker last = spawn({"--seconds", "1", "--kernel-us", "1000", "--alloc-mib", "20000"});
  ASSERT_TRUE(wait_ready(last, 3000));
  EXPECT_EQ(finish(last), 0);
}

TEST(Sharing, HolderDyingInsideTheMemoryLockIsRepaired) {
  // A process dies holding the memory lock, half-way through an update (used_bytes changed, its
  // slot not yet): the next locker must repair the total from the slots, and the reaper return it.
  const std::uint64_t recoveries = machine().state().devices[0].lock_recoveries.load();
  pid_t child = fork();
  if (child == 0) {
    simgpu::MachineConfig config;
    std::string error;
    simgpu::read_machine_config(config, error);
    simgpu::Machine* m = simgpu::Machine::attach(config, error);
    if (!m || !m->claim_slot(error) || !m->charge(0, 1ull << 30)) _exit(3);
    simgpu::DeviceState& d = m->state().devices[0];
    pthread_mutex_lock(&d.memory_lock);
    d.used_bytes += 12345;  // torn update
    _exit(0);               // dies holding the lock
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::uint64_t free_b = 0, total = 0;
  machine().memory_info(0, free_b, total);  // takes the lock: repairs it
  EXPECT_EQ(machine().state().devices[0].lock_recoveries.load(), recoveries + 1);
  EXPECT_EQ(total - free_b, 1ull << 30) << "the torn update was not repaired from the slots";
  EXPECT_EQ(machine().reap_dead_slots(), 1);
  machine().memory_info(0, free_b, total);
  EXPECT_EQ(free_b, total);
}

}  // namespace
