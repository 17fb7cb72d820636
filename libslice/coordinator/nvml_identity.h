// Which entry of NVML's list of a GPU's processes is this process (issue 26). NVML names processes
// by the PID the host gives them; in a PID namespace (every container, every pod) that is not the
// PID the process knows itself by, and a context nobody finds in the list is not charged: vLLM, told
// free = cap, fills the cap, and the card holds cap + context.
//
// How it is found, in this order:
//   1. the process is in the host's PID namespace: its own PID;
//   2. its /proc is the host's (its namespace was made without a /proc of its own, as
//      `unshare --pid --fork` does): the first PID of NSpid in /proc/self/status;
//   3. otherwise (a container with its own /proc), learned: around each creation of a context of its
//      own, the entries of NVML's list that grew are the candidates, and the candidates of successive
//      observations are intersected; a single one left is this process. Until then its memory is
//      not measured (slicectl status says so). One context created while another process's grows
//      at the same moment delays the answer to the next observation; after two observations that
//      disagree, only two that agree decide.
// Plain C++: the lists are NVML's answers, read by shim/nvml_use.cpp.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace slice {

struct NvmlProcessEntry {
  std::uint32_t pid = 0;
  std::uint64_t bytes = 0;
};

// The PID NVML lists this process under, where the kernel can tell (cases 1 and 2 above).
std::optional<std::uint32_t> nvml_pid_from_kernel();

class NvmlIdentity {
 public:
  using KernelAnswer = std::optional<std::uint32_t> (*)();
  // `kernel`: what the kernel says (nvml_pid_from_kernel; a test gives its own).
  explicit NvmlIdentity(KernelAnswer kernel = nvml_pid_from_kernel) : kernel_(kernel) {}
  // The PID, once known (from the kernel at first use, else learned); nullopt meanwhile.
  std::optional<std::uint32_t> pid();
  // One device's list before and after this process created a context there.
  void observe_context(const std::vector<NvmlProcessEntry>& before, const std::vector<NvmlProcessEntry>& after);
  // Forgotten (a forked child is another process).
  void reset();

 private:
  std::optional<std::uint32_t> known_locked();
  KernelAnswer kernel_;
  std::mutex mu_;
  bool asked_kernel_ = false;
  std::optional<std::uint32_t> pid_;
  std::vector<std::uint32_t> candidates_;  // empty: no observation yet
};

}  // namespace slice
