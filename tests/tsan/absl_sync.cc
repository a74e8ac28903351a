// Tells ThreadSanitizer about absl::Mutex, CondVar and Notification.
//
// Debian's Abseil is not built with -fsanitize=thread, so its Mutex hands
// the lock from thread to thread through atomics and futexes that TSan never
// sees: every access guarded by an absl::Mutex would be reported as a race.
// An instrumented Abseil would tell TSan itself (ABSL_TSAN_MUTEX_* in
// mutex.cc); this file does the same from outside. It defines the Mutex,
// CondVar and Notification members that hand a lock or an event between
// threads; being part of the executable, these definitions come before
// libabsl_synchronization.so's in symbol lookup, so our code, gRPC's and
// Abseil's own calls all land here. Each calls the library's function
// (looked up with dlsym(RTLD_NEXT)) and adds the happens-before edge TSan
// needs: __tsan_release on the mutex before it is let go, __tsan_acquire
// after it is taken. A Condition passed to Await/LockWhen is wrapped so that
// its evaluation acquires and releases too: Abseil evaluates it with the lock
// held, possibly on the thread that is unlocking, before the waiting call
// returns.
//
// Linked only into ELASTRUN_TSAN builds (cmake/threads.cmake). What is lost
// against an instrumented Abseil: TSan's lock-order (deadlock) reports and
// the "mutexes held" lines in its reports.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

#define ELASTRUN_STR2(x) #x
#define ELASTRUN_STR(x) ELASTRUN_STR2(x)

// The library's definition of a member, by its mangled name without the
// "_ZN4absl<len><inline namespace>" prefix (or "_ZNK..." for const members).
template <typename Fn>
Fn Real(const char* prefix, const char* rest) {
  const std::string ns = ELASTRUN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      std::string(prefix) + "4absl" + std::to_string(ns.size()) + ns + rest;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    // An Abseil whose ABI differs from the one this file was written for:
    // fail loudly rather than run without the lock's happens-before edges.
    std::fprintf(stderr, "tsan absl shim: %s not found in libabsl_synchronization\n",
                 name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// `real`: the library's function, looked up once per member.
#define REAL(Type, prefix, rest) static const auto real = Real<Type>(prefix, rest)

struct WrappedCondition {
  const absl::Condition* cond;
  absl::Mutex* mu;
};

// Runs on the waiter or on whichever thread lets the mutex go, with the lock
// held either way. Takes void* so that the wrapper below uses Condition's
// out-of-line constructor: a Condition built by an inline (instrumented)
// constructor would be a race between its writer and its evaluator that
// TSan cannot see past, as the hand-over of the waiter is inside Abseil.
bool EvalAcquiring(void* arg) {
  __tsan_acquire(arg);  // the waiter's release(&w): w and its Condition
  auto* w = static_cast<WrappedCondition*>(arg);
  __tsan_acquire(w->mu);
  const bool met = w->cond->Eval();
  // What the condition read happens before the waiter's acquire on return.
  __tsan_release(w->mu);
  return met;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

using LockFn = void (*)(Mutex*);
using TryFn = bool (*)(Mutex*);
using CondFn = void (*)(Mutex*, const Condition&);
using CondTimeoutFn = bool (*)(Mutex*, const Condition&, Duration);
using CondDeadlineFn = bool (*)(Mutex*, const Condition&, Time);

void Mutex::Lock() {
  REAL(LockFn, "_ZN", "5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}
void Mutex::ReaderLock() {
  REAL(LockFn, "_ZN", "5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}
bool Mutex::TryLock() {
  REAL(TryFn, "_ZN", "5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  REAL(TryFn, "_ZN", "5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::Unlock() {
  REAL(LockFn, "_ZN", "5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  REAL(LockFn, "_ZN", "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

// `wrapped`: `cond` behind EvalAcquiring, published (release on &w) to the
// thread that will evaluate it.
#define WRAP_COND(cond)                                            \
  WrappedCondition w{&(cond), this};                               \
  const Condition wrapped(&EvalAcquiring, static_cast<void*>(&w)); \
  __tsan_release(&w)

void Mutex::LockWhen(const Condition& cond) {
  REAL(CondFn, "_ZN", "5Mutex8LockWhenERKNS0_9ConditionE");
  WRAP_COND(cond);
  real(this, wrapped);
  __tsan_acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  REAL(CondFn, "_ZN", "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  WRAP_COND(cond);
  real(this, wrapped);
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(CondTimeoutFn, "_ZN",
       "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  WRAP_COND(cond);
  const bool met = real(this, wrapped, timeout);
  __tsan_acquire(this);  // held on return either way
  return met;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(CondDeadlineFn, "_ZN", "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  WRAP_COND(cond);
  const bool met = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  REAL(CondTimeoutFn, "_ZN",
       "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  WRAP_COND(cond);
  const bool met = real(this, wrapped, timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  REAL(CondDeadlineFn, "_ZN",
       "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  WRAP_COND(cond);
  const bool met = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return met;
}

// Await* let go of the lock while waiting and take it back before return.
void Mutex::Await(const Condition& cond) {
  REAL(CondFn, "_ZN", "5Mutex5AwaitERKNS0_9ConditionE");
  WRAP_COND(cond);
  __tsan_release(this);
  real(this, wrapped);
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  REAL(CondTimeoutFn, "_ZN", "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  WRAP_COND(cond);
  __tsan_release(this);
  const bool met = real(this, wrapped, timeout);
  __tsan_acquire(this);
  return met;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  REAL(CondDeadlineFn, "_ZN", "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  WRAP_COND(cond);
  __tsan_release(this);
  const bool met = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  REAL(void (*)(CondVar*, Mutex*), "_ZN", "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  REAL(bool (*)(CondVar*, Mutex*, Duration), "_ZN",
       "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  REAL(bool (*)(CondVar*, Mutex*, Time), "_ZN",
       "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

// Notification's waiters may return on an atomic load without taking its
// mutex, so the edge goes on the Notification itself. (HasBeenNotified() is
// inline and reads the flag directly; none of our code relies on it.)
void Notification::Notify() {
  REAL(void (*)(Notification*), "_ZN", "12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}
void Notification::WaitForNotification() const {
  REAL(void (*)(const Notification*), "_ZNK", "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  REAL(bool (*)(const Notification*, Duration), "_ZNK",
       "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  REAL(bool (*)(const Notification*, Time), "_ZNK",
       "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
