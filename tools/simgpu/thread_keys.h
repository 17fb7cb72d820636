// Per-thread state in pthread keys, read back and checked on every use: the simulated libcuda and
// libnvidia-ml keep what they know of each thread here.
//
// Why keys, and why checked: the real driver and NVML are user-mode libraries that keep their
// per-thread state in pthread keys (driver 580 on an H200: libcuda makes 3 keys by cuInit, and
// nvmlInit_v2 makes one). A key's value lives in a slot of the calling thread's control block, and
// every C library in the process writes the same slots: a second libc.so.6 (one that
// dlmopen(LM_ID_NEWLM) brings in) numbers its keys from 0 as the first one does, so its
// pthread_setspecific overwrites slots that keys of the first libc own, and the real driver then
// reads a foreign pointer and crashes (issue 22: every Python program under a libslice that loaded
// its own NVML that way). State in C++ thread_local alone never sees that happen. So the simulated
// libraries make their keys when they are loaded, as the real ones do, keep a shadow copy of what
// they stored in thread_local, and report (violations.h) a key that reads back anything else: a
// foreign pointer, NULL where something was stored, or a value where nothing was. Then they go on
// with what they stored, where the real driver would crash.
#pragma once

#include <pthread.h>

namespace simgpu {

// One pthread key of a simulated library, whose value on each thread is that thread's record.
class ThreadKey {
 public:
  // Makes the key: construct it from the library's constructor (a global object), so that the key
  // exists once the library is loaded. `owner` and `what` name it in reports ("libcuda", "context
  // stack"). `destroy` frees a value that this library stored, when its thread exits. At most
  // kMaxThreadKeys keys per library.
  ThreadKey(const char* owner, const char* what, void (*destroy)(void*));
  ThreadKey(const ThreadKey&) = delete;
  ThreadKey& operator=(const ThreadKey&) = delete;

  // What this thread stored in the key (nullptr: nothing yet), after reading the key back; a key
  // that reads anything else is reported once, as a breach seen by `function` (the entry point).
  void* get(const char* function) const;
  // Stores `value` for this thread, in the key and in the shadow copy.
  void set(void* value) const;
  pthread_key_t key() const { return key_; }

 private:
  int index_ = -1;  // into the library's table of keys and the thread's shadow copies
  pthread_key_t key_{};
};

constexpr int kMaxThreadKeys = 4;

// A record of type Record per thread in a ThreadKey: made on first use, freed when the thread exits.
template <class Record>
class ThreadRecord {
 public:
  ThreadRecord(const char* owner, const char* what)
      : key_(owner, what, [](void* p) { delete static_cast<Record*>(p); }) {}

  // This thread's record, or nullptr when it has none yet.
  Record* find(const char* function) const { return static_cast<Record*>(key_.get(function)); }
  // This thread's record, made now if it has none.
  Record& get(const char* function) const {
    if (Record* r = find(function)) return *r;
    auto* r = new Record();
    key_.set(r);
    return *r;
  }
  pthread_key_t key() const { return key_.key(); }

 private:
  ThreadKey key_;
};

}  // namespace simgpu
