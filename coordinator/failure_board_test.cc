// FailureBoard over a real MemoryStore shared by "ranks" (the multi-process proof is
// tests/faults: EverySurvivorNamesTheKilledRank).
#include "coordinator/failure_board.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

#include "rendezvous/memory_store.h"

namespace kolo::coord {
namespace {

std::shared_ptr<Store> shared(MemoryStore& store) {
  return std::shared_ptr<Store>(&store, [](Store*) {});
}

// Rank 1 sees rank 2 die and records first; rank 0 then sees rank 1's link break: its error
// names rank 2 first, then what it saw itself.
TEST(FailureBoardTest, TheFirstRecordedFailureWinsOnEveryRank) {
  MemoryStore store;
  FailureBoard r1(shared(store), "kolo/s0", 1, 4), r0(shared(store), "kolo/s0", 0, 4);
  const Status dead = Status::PeerFailure("tcp: the connection was closed by rank 2 (h:1)");
  EXPECT_EQ(r1.name_first_failure(dead).to_string(), dead.to_string());
  const Status seen = Status::PeerFailure("tcp: the connection was closed by rank 1 (h:2)");
  const Status named = r0.name_first_failure(seen);
  EXPECT_EQ(named.code(), StatusCode::kPeerFailure);
  EXPECT_EQ(named.message(),
            "the job's first failure, as rank 1 saw it: PeerFailure: tcp: the connection was "
            "closed by rank 2 (h:1); this rank (rank 0) then saw: tcp: the connection was closed "
            "by rank 1 (h:2)");
  EXPECT_EQ(store.add("kolo/s0/failure/count", 0).value(), 2);
}

// The executor and then the background loop report one failure: one record, one answer.
TEST(FailureBoardTest, ARankRecordsOnceAndRepeatsItsAnswer) {
  MemoryStore store;
  FailureBoard r0(shared(store), "kolo/s0", 0, 4), r3(shared(store), "kolo/s0", 3, 4);
  ASSERT_EQ(r0.name_first_failure(Status::Timeout("rank 2 stopped answering")).code(),
            StatusCode::kTimeout);
  const Status seen = Status::PeerFailure("rank 0 closed");
  const Status first = r3.name_first_failure(seen);
  const Status again = r3.name_first_failure(Status::PeerFailure("negotiation: rank 0 closed"));
  EXPECT_EQ(again.to_string(), first.to_string());
  EXPECT_NE(first.message().find("as rank 0 saw it: Timeout: rank 2 stopped answering"),
            std::string::npos)
      << first.message();
  EXPECT_EQ(store.add("kolo/s0/failure/count", 0).value(), 2);
}

// Failures that are not about a peer are reported as they are, and recorded nowhere.
TEST(FailureBoardTest, OtherFailuresPassUnchanged) {
  MemoryStore store;
  FailureBoard r0(shared(store), "kolo/s0", 0, 4);
  const Status bad = Status::InvalidArgument("tensor 'x': shape mismatch");
  EXPECT_EQ(r0.name_first_failure(bad).to_string(), bad.to_string());
  EXPECT_FALSE(store.check("kolo/s0/failure/count").value());
  FailureBoard none(nullptr, "kolo/s0", 0, 4);
  const Status dead = Status::PeerFailure("rank 1 died");
  EXPECT_EQ(none.name_first_failure(dead).to_string(), dead.to_string());
}

// Rank 2 of 4 is frozen: it records nothing and breaks nothing. Rank 0 timed out on rank 3 and
// recorded first, rank 3 on rank 2, rank 1 on rank 0; every rank names rank 2, the one rank
// without a record, ahead of the first record (which blames rank 3, alive).
TEST(FailureBoardTest, TheOneRankThatRecordedNothingIsNamedAfterTimeouts) {
  MemoryStore store;
  std::vector<std::unique_ptr<FailureBoard>> boards;
  for (int r = 0; r < 4; ++r)
    boards.push_back(std::make_unique<FailureBoard>(shared(store), "kolo/s0", r, 4));
  const std::map<int, int> waited_on = {{0, 3}, {3, 2}, {1, 0}};
  std::map<int, Status> answers;
  std::vector<std::thread> threads;
  std::mutex mu;
  for (const auto& [r, peer] : waited_on)
    threads.emplace_back([&, r = r, peer = peer] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));  // rank 0 first
      Status st = boards[static_cast<size_t>(r)]->name_first_failure(Status::Timeout(
          "tcp: a transfer with rank " + std::to_string(peer) + " made no progress"));
      std::lock_guard<std::mutex> lock(mu);
      answers[r] = st;
    });
  for (auto& t : threads) t.join();
  for (const auto& [r, st] : answers) {
    EXPECT_EQ(st.code(), StatusCode::kTimeout);
    EXPECT_EQ(st.message().rfind("the job's first failure: rank 2 stopped answering (", 0), 0u)
        << r << ": " << st.message();
  }
  EXPECT_NE(answers[3].message().find("as rank 0 saw it: Timeout: tcp: a transfer with rank 3"),
            std::string::npos)
      << answers[3].message();
  // With every rank's record there, nobody is called frozen: the first record wins.
  FailureBoard late(shared(store), "kolo/s0", 2, 4);
  const Status mine = late.name_first_failure(Status::Timeout("rank 2 waited too"));
  EXPECT_EQ(mine.message().rfind("the job's first failure, as rank 0 saw it: Timeout", 0), 0u)
      << mine.message();
}

}  // namespace
}  // namespace kolo::coord
