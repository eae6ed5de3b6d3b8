// Locking written into the code: Clang's thread-safety analysis (-Wthread-safety, on in the tsan
// check build, scripts/run-checks.sh) proves at compile time that every member declared
// KOLO_GUARDED_BY(mu_) is touched only with mu_ held. Other compilers see plain code.
//
// libstdc++'s std::mutex carries no capability attributes, so the analysis cannot follow it:
// members guarded this way use kolo::Mutex and kolo::MutexLock below, which are std::mutex and
// std::unique_lock with the attributes added. A condition variable waits on lock.native().
// A lambda that reads guarded members under the lock (a wait predicate) says so with
// KOLO_REQUIRES after its parameter list: [&]() KOLO_REQUIRES(mu_) { return done_; }.
#pragma once

#include <mutex>

#if defined(__clang__)
#define KOLO_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define KOLO_THREAD_ATTRIBUTE(x)
#endif

#define KOLO_CAPABILITY(name) KOLO_THREAD_ATTRIBUTE(capability(name))
#define KOLO_SCOPED_CAPABILITY KOLO_THREAD_ATTRIBUTE(scoped_lockable)
#define KOLO_GUARDED_BY(mu) KOLO_THREAD_ATTRIBUTE(guarded_by(mu))
#define KOLO_PT_GUARDED_BY(mu) KOLO_THREAD_ATTRIBUTE(pt_guarded_by(mu))
#define KOLO_REQUIRES(...) KOLO_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define KOLO_EXCLUDES(...) KOLO_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
#define KOLO_ACQUIRE(...) KOLO_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define KOLO_RELEASE(...) KOLO_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
#define KOLO_NO_THREAD_SAFETY_ANALYSIS KOLO_THREAD_ATTRIBUTE(no_thread_safety_analysis)

namespace kolo {

// std::mutex, as a capability the analysis tracks.
class KOLO_CAPABILITY("mutex") Mutex {
 public:
  void lock() KOLO_ACQUIRE() { mu_.lock(); }
  void unlock() KOLO_RELEASE() { mu_.unlock(); }
  // For MutexLock only.
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::unique_lock underneath, so it can wait on a
// std::condition_variable through native() and be released early with unlock()).
class KOLO_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) KOLO_ACQUIRE(mu) : lock_(mu.native()) {}
  ~MutexLock() KOLO_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() KOLO_RELEASE() { lock_.unlock(); }
  void lock() KOLO_ACQUIRE() { lock_.lock(); }
  // What std::condition_variable::wait takes. The wait releases and retakes the mutex; to the
  // analysis the capability stays held throughout, which is what the caller's code sees.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace kolo
