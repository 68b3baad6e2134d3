// src/core/sync.hpp - a mutex Clang's thread-safety analysis can follow.
// With Clang, -Wthread-safety (an error in every Clang build: scripts/fuzz.sh
// compiles the core with it in CI) checks that every member marked
// GUARDED_BY(mu) is touched only with `mu` held and that every function
// marked REQUIRES(mu) is called with it held. Other compilers ignore the
// annotations. The lock order is in docs/design.md, "The lock hierarchy".
#pragma once

#include <mutex>

#if defined(__clang__)
#define REMORA_TSA(x) __attribute__((x))
#else
#define REMORA_TSA(x)
#endif

#define REMORA_CAPABILITY(x) REMORA_TSA(capability(x))
#define REMORA_SCOPED_CAPABILITY REMORA_TSA(scoped_lockable)
#define REMORA_GUARDED_BY(x) REMORA_TSA(guarded_by(x))
#define REMORA_REQUIRES(...) REMORA_TSA(requires_capability(__VA_ARGS__))
#define REMORA_EXCLUDES(...) REMORA_TSA(locks_excluded(__VA_ARGS__))
#define REMORA_ACQUIRE(...) REMORA_TSA(acquire_capability(__VA_ARGS__))
#define REMORA_RELEASE(...) REMORA_TSA(release_capability(__VA_ARGS__))

namespace remora::detail {

/// std::mutex, visible to the analysis.
class REMORA_CAPABILITY("mutex") Mutex {
 public:
  void lock() REMORA_ACQUIRE() { m_.lock(); }
  void unlock() REMORA_RELEASE() { m_.unlock(); }

 private:
  std::mutex m_;
};

/// std::lock_guard for Mutex.
class REMORA_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& m) REMORA_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~MutexLock() REMORA_RELEASE() { m_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_;
};

}  // namespace remora::detail
