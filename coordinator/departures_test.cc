// Departures over a real MemoryStore shared by "ranks", and what a Runtime's pending operations
// end with when a peer departs (the multi-process proof, through kolorun:
// tools/kolorun/kolorun_test.cc, ARankThatLeavesEarlyIsNamedAndTheSurvivorsSayItLeft).
#include "coordinator/departures.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "coordinator/test_cluster.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/world.h"

namespace kolo::coord {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::shared_ptr<Store> shared(MemoryStore& store) {
  return std::shared_ptr<Store>(&store, [](Store*) {});
}

TEST(DeparturesTest, ARankThatRecordedNothingCalledShutdown) {
  MemoryStore store;
  Departures r0(shared(store), "kolo/s0", 0, 0ms);
  EXPECT_EQ(r0.describe(1), std::nullopt);
  EXPECT_EQ(Departures(nullptr, "kolo/s0", 0, 0ms).describe(1), std::nullopt);
}

TEST(DeparturesTest, ADepartureIsNamedWithTheLaunchersRecordOfItsEnd) {
  MemoryStore store;
  Departures r1(shared(store), "kolo/s0", 1, 0ms), r0(shared(store), "kolo/s0", 0, 1s);
  r1.record();
  // A record of another session is not this one's.
  EXPECT_EQ(Departures(shared(store), "kolo/s1", 0, 0ms).describe(1), std::nullopt);
  std::thread launcher([&] {
    std::this_thread::sleep_for(50ms);  // kolorun reaps the process a little later
    ASSERT_TRUE(store.set(launcher_exit_key(1), "exited with status 1").ok());
  });
  EXPECT_EQ(r0.describe(1),
            "rank 1 exited with status 1 before finishing, without calling kolo::shutdown() (it "
            "returned from main or called exit)");
  launcher.join();
}

// Without a launcher that records exits (mpirun), or when its record does not come in time.
TEST(DeparturesTest, WithoutTheLaunchersRecordTheDepartureIsNamedAlone) {
  MemoryStore store;
  Departures(shared(store), "kolo/s0", 2, 0ms).record();
  const std::string alone =
      "rank 2 exited without calling kolo::shutdown() (it returned from main or called exit) "
      "before finishing";
  EXPECT_EQ(Departures(shared(store), "kolo/s0", 0, 0ms).describe(2), alone);
  const auto start = Clock::now();
  EXPECT_EQ(Departures(shared(store), "kolo/s0", 0, 200ms).describe(2), alone);
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 200ms);
  EXPECT_LT(waited, 5s);
}

// Rank 0 shuts down while rank 1 waits in an allreduce rank 0 never submits: rank 1's operation
// ends with the departure's description; a Runtime with nothing pending does not ask.
TEST(DeparturesTest, PendingOperationsEndWithTheDepartureAndIdleRanksDoNotAsk) {
  std::atomic<int> asked{0};
  RuntimeConfig config = testkit::test_config();
  config.describe_departure = [&asked](int rank) -> std::optional<std::string> {
    ++asked;
    return "rank " + std::to_string(rank) + " left";
  };
  {
    testkit::Cluster c(2, config);
    std::vector<float> v(1, 1.0f);
    Handle pending = testkit::allreduce(c[1], "never", v);
    (void)c[0].shutdown();
    Status st = pending.wait();
    EXPECT_EQ(st.code(), StatusCode::kAborted);
    EXPECT_EQ(st.message(), "kolo was shut down: rank 0 left; pending operations were cancelled");
    EXPECT_EQ(asked.load(), 1);
  }
  asked = 0;
  {
    testkit::Cluster idle(2, config);
    (void)idle[0].shutdown();
  }
  EXPECT_EQ(asked.load(), 0);
  config.describe_departure = [](int) -> std::optional<std::string> { return std::nullopt; };
  testkit::Cluster c(2, config);
  std::vector<float> v(1, 1.0f);
  Handle pending = testkit::allreduce(c[1], "never", v);
  (void)c[0].shutdown();
  EXPECT_EQ(pending.wait().message(),
            "kolo was shut down (rank 0 called shutdown()); pending operations were cancelled");
}

// A process set's (or pair's) Runtime says the same of a member that left, under its label, and
// asks about the member by the rank its config maps (process_sets.cc: the job's rank).
TEST(DeparturesTest, AProcessSetsPendingOperationsEndWithTheMembersDeparture) {
  RuntimeConfig config = testkit::test_config();
  config.label = "process set 1";
  const std::vector<int> members = {2, 5};
  config.describe_departure = [&members](int set_rank) -> std::optional<std::string> {
    return "rank " + std::to_string(members[set_rank]) + " left";
  };
  testkit::Cluster c(2, config);
  std::vector<float> v(1, 1.0f);
  Handle pending = testkit::allreduce(c[1], "never", v);
  (void)c[0].shutdown();
  Status st = pending.wait();
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_EQ(st.message(),
            "process set 1 was closed: rank 2 left; pending operations were cancelled");
}

// A member that called remove_process_set() or shutdown() is named as before.
TEST(DeparturesTest, AProcessSetsMemberThatClosedItIsNamedAsBefore) {
  RuntimeConfig config = testkit::test_config();
  config.label = "process set 1";
  config.describe_departure = [](int) -> std::optional<std::string> { return std::nullopt; };
  testkit::Cluster c(2, config);
  std::vector<float> v(1, 1.0f);
  Handle pending = testkit::allreduce(c[1], "never", v);
  (void)c[0].shutdown();
  EXPECT_EQ(pending.wait().message(),
            "process set 1 was removed (its rank 0 called remove_process_set() or shutdown()); "
            "pending operations were cancelled");
}

}  // namespace
}  // namespace kolo::coord
