// Checks the ThreadSanitizer build itself (ELASTRUN_TSAN only), so that a
// green TSan run means something: a race is reported, and Abseil's
// synchronization (through tests/tsan/absl_sync.cc) is not taken for one.
#include <cstdlib>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace elastrun::tsan {
namespace {

// Two threads write one int with nothing between them. (It is read after
// the joins, so that the compiler keeps the writes.)
void Race() {
  static int shared = 0;
  std::thread a([] { shared = 1; });
  std::thread b([] { shared = 2; });
  a.join();
  b.join();
  std::exit(shared == 0 ? 1 : 0);
}

TEST(TsanCanaryTest, AnUnguardedWriteIsReported) {
  // The death test re-runs this binary; there TSan stops at the first report.
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  setenv("TSAN_OPTIONS", "halt_on_error=1 exitcode=66", 1);
  EXPECT_EXIT(Race(), ::testing::ExitedWithCode(66), "ThreadSanitizer: data race");
}

// The same kind of writes, ordered by each synchronization that the shim
// annotates: any report here fails this test (TSan's exit code).
TEST(TsanCanaryTest, AbseilSynchronizationIsSeen) {
  absl::Mutex mu;
  int guarded = 0;
  bool ready = false;
  auto add = [&] {
    for (int i = 0; i < 100; ++i) {
      absl::MutexLock lock(&mu);
      ++guarded;
    }
  };
  std::thread a(add);
  std::thread b(add);
  // LockWhen/Await: the condition reads guarded state on whichever thread
  // evaluates it.
  std::thread waiter([&] {
    mu.LockWhen(absl::Condition(&ready));
    guarded += 1000;
    mu.Unlock();
  });
  {
    absl::MutexLock lock(&mu);
    auto all_added = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return guarded >= 200; };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all_added), absl::Seconds(60)));
    ready = true;
  }
  a.join();
  b.join();
  waiter.join();

  // CondVar.
  absl::CondVar cv;
  int handed = 0;
  std::thread producer([&] {
    absl::MutexLock lock(&mu);
    handed = 1;
    cv.Signal();
  });
  {
    absl::MutexLock lock(&mu);
    while (handed == 0) cv.Wait(&mu);
  }
  producer.join();

  // Notification: plain data handed over by Notify.
  int payload = 0;
  absl::Notification done;
  std::thread notifier([&] {
    payload = 42;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(payload, 42);
  notifier.join();

  absl::MutexLock lock(&mu);
  EXPECT_EQ(guarded, 1200);
  EXPECT_EQ(handed, 1);
}

}  // namespace
}  // namespace elastrun::tsan
