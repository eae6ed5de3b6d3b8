// meet(): the meeting of two ranks before they connect a point-to-point pair, with both ranks
// as threads over a MemoryStore (tests/process_sets runs the pairs in real jobs).
#include "coordinator/pairs.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "rendezvous/memory_store.h"

namespace kolo::coord {
namespace {

const std::string kKey = "p2p/0-1/meet";
Status never() { return Status::Ok(); }

TEST(Meet, TheSecondToArriveMeetsTheFirstWhoWaits) {
  MemoryStore store;
  Status first;
  std::thread waiter([&] { first = meet(store, kKey, "gone/1", 1, never); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(meet(store, kKey, "gone/0", 0, never).ok());
  waiter.join();
  EXPECT_TRUE(first.ok()) << first.to_string();
}

TEST(Meet, ARankThatGivesUpWithdrawsAndTheLateComerIsToldTheFirstIsGone) {
  MemoryStore store;
  Status why = meet(store, kKey, "gone/1", 1, [] { return Status::Aborted("shut down"); });
  EXPECT_EQ(why.to_string(), "Aborted: shut down");
  Status late = meet(store, kKey, "gone/0", 0, never);
  EXPECT_EQ(late.code(), StatusCode::kAborted);
  EXPECT_NE(late.message().find("rank 0 ended its Kolo session"), std::string::npos)
      << late.to_string();
}

TEST(Meet, APeerWhoseSessionEndedWithoutComingFailsTheWaiter) {
  MemoryStore store;
  ASSERT_TRUE(store.set("gone/1", "1").ok());
  Status st = meet(store, kKey, "gone/1", 1, never);
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_NE(st.message().find("rank 1 ended its Kolo session (kolo::shutdown()) before its first "
                              "send or recv with this rank"),
            std::string::npos)
      << st.to_string();
}

// The race the withdrawal settles: the peer arrives (and connects) while this rank decides to
// give up. This rank's withdrawal then finds the peer's arrival and it connects after all,
// since the peer, connecting, would otherwise wait for it.
TEST(Meet, GivingUpAfterThePeerArrivedStillMeetsIt) {
  MemoryStore store;
  std::atomic<bool> peer_arrived{false};
  Status st = meet(store, kKey, "gone/1", 1, [&] {
    if (!peer_arrived.exchange(true)) {
      // The peer arrives between this rank's poll and its withdrawal.
      EXPECT_TRUE(meet(store, kKey, "gone/0", 0, never).ok());
    }
    return Status::Aborted("shut down");
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
}

}  // namespace
}  // namespace kolo::coord
