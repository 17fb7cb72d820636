// What the other tenants on one GPU are doing, for the compute scheduler: their effective shares,
// the device time they received, whether they have work on the device or want it. Read from their
// tenant files with pread (never loaded through a mapping: a tenant that truncates its own file
// must not fault the readers; a change of turns is waited for through one, where only the kernel
// reads the word: wait_for), and never trusted: a field out of range is clamped, a file that is not a valid
// tenant file is skipped.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "config_values.h"
#include "coordinator_layout.h"
#include "awake_bell.h"
#include "futex.h"

namespace slice {

// A count confirmed within this long is believed; older means its process died or stopped.
inline constexpr std::uint64_t kComputeHeartbeatNs = 50'000'000;

struct TenantCompute {
  std::string name;
  std::uint32_t share = 100;
  std::uint32_t limit = 100;
  Priority priority = Priority::normal;
  std::uint64_t received_ns = 0;         // cumulative, on this GPU
  std::uint64_t window_received_ns = 0;  // over the window asked for (received_over)
  bool active = false;                   // has work on the GPU now
  bool wanting = false;                  // has work held back by libslice
  std::uint32_t joined_ms = 0;           // DeviceEntry::joined_ms
  std::uint32_t turn_seq = 0;            // DeviceEntry::turn_seq, as read
  std::uint64_t drain_eta_ns = 0;        // DeviceEntry::drain_eta_ns: it yields, done then
  int board_file = -1;                   // which of the board's files it came from (for wait_for)
  int entry = -1;                        // and which of its device entries
};

// Device time received over the last `window_ns`, from a tenant's shared history (samples at fixed
// steps, interpolated) and its cumulative total now. Every process computes the same figure for a
// tenant, whenever it started watching: the scheduler's decisions must agree.
std::uint64_t received_over(const ReceivedHistory& history, std::uint64_t cumulative_ns, std::uint64_t now_ns,
                            std::uint64_t window_ns);
// Whether a process of the tenant joined on the GPU within the last `window_ns`.
bool joined_within(const TenantCompute& t, std::uint64_t now_ns, std::uint64_t window_ns);
// Records `cumulative_ns` as the sample of the step `now_ns` falls in, and of any steps missed.
void record_history(ReceivedHistory& history, std::uint64_t cumulative_ns, std::uint64_t now_ns);

// What a process believes of another tenant's file: everything its own user's tenants say (its
// user can do anything to them anyway) and what root alone writes; of a tenant that root manages
// and a group writes, a priority above normal only where the administrator's policy says so; and
// of another user's tenant, nothing that could hold this one back: it counts as low (idle time
// only). A user with no GPU could otherwise write a tenant that claims to be busy, behind its
// share and of high priority, and starve every other tenant (issue 29).
enum class TenantTrust { believed, managed_by_a_group, stranger };
TenantTrust trust_of(uid_t file_owner, mode_t file_mode, uid_t reader);
// What the administrator's policy sets for a group's tenant (each where set).
struct PolicyCompute {
  std::optional<Priority> priority;
  std::optional<std::uint32_t> share, limit;
};
// `t` as far as `trust` lets it count. A group's tenant: the policy's priority where it sets one,
// else at most normal; its share and limit at most the policy's. Another user's tenant: low, and
// never with work on the device or waiting for it (it holds back nobody, not even a low tenant).
void apply_trust(TenantTrust trust, const PolicyCompute& policy, TenantCompute& t);

class ComputeBoard {
 public:
  // `policy_dir`: where the administrator's policies are (the priorities a group's tenant may have).
  ComputeBoard(std::string dir, std::string self, std::string policy_dir = "");
  ~ComputeBoard();
  ComputeBoard(const ComputeBoard&) = delete;
  ComputeBoard& operator=(const ComputeBoard&) = delete;

  // The tenants other than `self` that use the GPU `uuid`, with what each received over the last
  // `window_ns`. The folder is listed again when it changed (looked at every 10 ms: a new tenant is
  // seen within that, and has the device within the 100 ms a neighbour has to give it back), and
  // every second regardless. Tenants that rest (nothing on the GPU, nothing received over the
  // window) are not read again until one rings the bell (awake_bell.h) or a second passed, so a
  // look costs the same with 2 tenants or 256 of which 2 work.
  // Cheap enough to call every few hundred microseconds: a tenant's whole start (and its history)
  // is read every 100 ms; in between only its device entry, one small pread (the window's figure
  // from the history then kept: read_entry).
  void read(const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns,
            std::vector<TenantCompute>& out);
  // Sleeps until tenant `t` (a row of the last read) publishes a change of turns on this GPU (it
  // starts or stops wanting it, or yields it: DeviceEntry::turn_seq), at most `timeout_ns`; at
  // once if what `t` says is no longer so. The word is waited on through a read-only mapping of the
  // tenant's file that is never loaded from (the word and the entry are read with pread), so a
  // tenant that truncates its file cannot fault the waiter (futex.h); `failed` then, and the caller
  // sleeps on its own.
  WaitResult wait_for(const TenantCompute& t, std::uint64_t timeout_ns);
  // From another thread: ends a wait_for under way now (its word's other sleepers, in any
  // process, wake too, and simply look again).
  void interrupt();

 private:
  void look(std::uint64_t now_ns);    // every kLookNs: the bell, and whether the listing changed
  void rescan(std::uint64_t now_ns);  // lists the tenants folder
  struct File {
    std::string name;
    int fd = -1;
    ino_t inode = 0;  // a file of that name made anew (slicectl rm, then a new process) is opened again
    int entry = -1;   // its device entry for the GPU last asked about (-1: look for it, -2: none)
    // Its history as of the last full read (aligned for the atomics loaded from it).
    alignas(ReceivedHistory) std::array<unsigned char, sizeof(ReceivedHistory)> history{};
    bool has_history = false;
    TenantCompute last;                         // as of the last full read
    std::uint64_t dormant_until_ns = 0;         // idle with nothing received lately: not read again before
    TenantTrust trust = TenantTrust::stranger;  // from its owner and mode (at each rescan)
    PolicyCompute policy;                       // the administrator's, for a group's tenant
    void* page = nullptr;                       // read-only mapping of the page at `page_offset` (turn_seq words)
    off_t page_offset = -1;
  };
  static void unmap(File& f);
  bool read_full(File& f, const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns);
  bool read_entry(File& f, const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns);
  std::uint64_t full_read_ns_ = 0;
  std::atomic<const std::atomic<std::uint32_t>*> waiting_on_{nullptr};  // the word wait_for sleeps on
  // Where tenant files are read into (a member, not thread-local storage, which a preloaded
  // library keeps small): the header and device entries, one entry.
  std::vector<unsigned char> start_buffer_;
  std::vector<unsigned char> entry_buffer_;
  std::string dir_;
  std::string self_;
  std::string policy_dir_;
  std::vector<File> files_;
  std::vector<std::size_t> working_;  // files read at every look (indices into files_)
  std::deque<std::size_t> resting_;   // files that rest (dormant_until_ns set), longest resting first
  std::uint64_t scanned_ns_ = 0;
  std::uint64_t policies_read_ns_ = 0;  // the groups' tenants' policies, read at most once a second
  bool scanned_ = false;
  std::uint64_t looked_ns_ = 0;  // when the folders were last looked at
  FolderChanges tenants_folder_;
  FolderChanges awake_folder_;
  bool bell_works_ = false;             // the coordinator has a bell's folder: resting tenants rest longer
  bool bell_trusted_ = false;           // bell_trusted(), as last looked at
  std::uint64_t trust_checked_ns_ = 0;  // then
  bool rung_ = false;                   // it rang since the last read: resting tenants are read again
};

}  // namespace slice
