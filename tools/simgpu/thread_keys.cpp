#include "thread_keys.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "violations.h"

namespace simgpu {

namespace {

// The library's keys (each library that links this file has its own table). Written only while the
// library is loaded, before any of its functions can be called.
struct KeyInfo {
  const char* owner = nullptr;
  const char* what = nullptr;
  pthread_key_t key{};
  bool keyed = false;  // pthread_key_create succeeded; otherwise the shadow copy alone holds the state
  void (*destroy)(void*) = nullptr;
};
KeyInfo g_keys[kMaxThreadKeys];
int g_key_count = 0;

// What this thread stored in each key, and the foreign value last reported (reported once, not at
// every call). Trivially destructible on purpose: thread_local objects with destructors are gone
// before the key destructors run at thread exit, and those read this.
struct Shadow {
  void* stored;
  void* reported;
  bool has_reported;
};
thread_local Shadow t_shadow[kMaxThreadKeys];

std::string describe(const void* p) {
  if (p == nullptr) return "NULL";
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

void report(const char* function, int index, const void* read, const void* stored) {
  const KeyInfo& k = g_keys[index];
  report_violation(function, "this thread's pthread key " + std::to_string(k.key) + " (" + k.owner + ": " + k.what +
                                 ") reads " + describe(read) + " where the library stored " +
                                 (stored ? describe(stored) : std::string("nothing")) +
                                 ": another C library in the process has written that key's slot (a second "
                                 "libc.so.6, as dlmopen(LM_ID_NEWLM) loads, numbers its pthread keys from 0 too and "
                                 "writes the same per-thread slots); the real library would use that value and "
                                 "crash. Going on with the stored value");
}

// The key's destructor, one per table index (pthread hands a destructor only the value). The value
// glibc hands over is the key's slot: a foreign one is reported and left alone, never freed; what
// this library stored is freed either way.
template <int I>
void at_thread_exit(void* value) {
  Shadow& s = t_shadow[I];
  void* ours = std::exchange(s.stored, nullptr);
  if (value != ours) report("thread exit", I, value, ours);
  s.has_reported = false;
  if (ours) g_keys[I].destroy(ours);
}

template <int... I>
constexpr auto destructors(std::integer_sequence<int, I...>) {
  return std::array<void (*)(void*), sizeof...(I)>{&at_thread_exit<I>...};
}
constexpr auto kDestructors = destructors(std::make_integer_sequence<int, kMaxThreadKeys>{});

}  // namespace

ThreadKey::ThreadKey(const char* owner, const char* what, void (*destroy)(void*)) {
  if (g_key_count == kMaxThreadKeys) {
    std::fprintf(stderr, "simgpu: more than %d thread keys in %s\n", kMaxThreadKeys, owner);
    std::abort();
  }
  index_ = g_key_count++;
  KeyInfo& k = g_keys[index_];
  k.owner = owner;
  k.what = what;
  k.destroy = destroy;
  const int err = pthread_key_create(&k.key, kDestructors[index_]);
  k.keyed = err == 0;
  if (!k.keyed)  // out of keys (PTHREAD_KEYS_MAX): the state still works, unchecked
    std::fprintf(stderr, "simgpu: %s: pthread_key_create (%s): %s; not checked\n", owner, what, std::strerror(err));
  key_ = k.key;
}

void* ThreadKey::get(const char* function) const {
  Shadow& s = t_shadow[index_];
  if (!g_keys[index_].keyed) return s.stored;
  void* read = pthread_getspecific(key_);
  if (read == s.stored) {
    s.has_reported = false;  // in order again: a later overwrite is reported anew
  } else if (!s.has_reported || s.reported != read) {
    s.has_reported = true;
    s.reported = read;
    report(function, index_, read, s.stored);
  }
  return s.stored;
}

void ThreadKey::set(void* value) const {
  t_shadow[index_].stored = value;
  t_shadow[index_].has_reported = false;
  if (g_keys[index_].keyed) pthread_setspecific(key_, value);
}

}  // namespace simgpu
