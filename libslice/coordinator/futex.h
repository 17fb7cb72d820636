// Sleeping until a 32-bit word changes, instead of polling it: Linux futexes. Waits always have a
// deadline. `shared`: the word lies in a file mapping that other processes map too (a tenant file);
// otherwise it is this process's own memory (FUTEX_PRIVATE, cheaper).
//
// A futex wait on a word in a file that its owner truncated is not a crash: the kernel reads the
// word itself and answers EFAULT, where a load by this process would raise SIGBUS. That is why a
// process may wait on another tenant's word through a read-only mapping it never reads from.
#pragma once

#include <atomic>
#include <cstdint>

namespace slice {

enum class WaitResult { changed, timed_out, failed };

// Sleeps while `*word == expected`, at most `timeout_ns`. `changed` also when it had changed before
// the call, or a signal or spurious wake ended the wait early (callers look again). `failed` only
// for a word whose file was truncated (EFAULT); where futexes are refused altogether it sleeps the
// timeout and says `timed_out`, so a caller's loop never spins.
WaitResult futex_wait(const std::atomic<std::uint32_t>* word, std::uint32_t expected, std::uint64_t timeout_ns,
                      bool shared);
// Wakes every thread (of any process, when `shared`) sleeping on `word`.
void futex_wake_all(const std::atomic<std::uint32_t>* word, bool shared);

}  // namespace slice
