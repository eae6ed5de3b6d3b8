// FailureBoard over a real MemoryStore shared by "ranks" (the multi-process proof is
// tests/faults: EverySurvivorNamesTheKilledRank).
#include "coordinator/failure_board.h"

#include <gtest/gtest.h>

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
  FailureBoard r1(shared(store), "kolo/s0", 1), r0(shared(store), "kolo/s0", 0);
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
  FailureBoard r0(shared(store), "kolo/s0", 0), r3(shared(store), "kolo/s0", 3);
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
  FailureBoard r0(shared(store), "kolo/s0", 0);
  const Status bad = Status::InvalidArgument("tensor 'x': shape mismatch");
  EXPECT_EQ(r0.name_first_failure(bad).to_string(), bad.to_string());
  EXPECT_FALSE(store.check("kolo/s0/failure/count").value());
  FailureBoard none(nullptr, "kolo/s0", 0);
  const Status dead = Status::PeerFailure("rank 1 died");
  EXPECT_EQ(none.name_first_failure(dead).to_string(), dead.to_string());
}

}  // namespace
}  // namespace kolo::coord
