// Starts process_sets_worker and p2p_worker jobs through kolorun (tcp, shm) and mpirun (mpi)
// and checks every rank's output: every operation on sets of every shape for 2 to 5 ranks,
// concurrent sets, a non-member's submission, bad rank lists, removal with pending work, static
// sets, the helpers (grouped gathers, objects) on a set without rank 0; point-to-point sends
// and their bad input.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::run_command;

std::string kolorun(const std::string& backend, int np, const std::string& scenario,
                    const std::string& env = "", const char* worker = KOLO_TEST_WORKER) {
  return env + "KOLO_CPU_OPERATIONS=" + backend + " " + KOLO_TEST_KOLORUN + " -np " +
         std::to_string(np) + " " + worker + " " + scenario;
}

std::string backend_and_ranks(const ::testing::TestParamInfo<std::tuple<const char*, int>>& info) {
  return std::string(std::get<0>(info.param)) + "_np" + std::to_string(std::get<1>(info.param));
}

class Sets : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(Sets, EveryOperationOnEveryShapeConcurrently) {
  const auto [backend, np] = GetParam();
  auto r = run_command(kolorun(backend, np, "sets"), 150);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "sets passed"), np) << r.output;
  // The messages every rank saw: a non-member names the set and itself; a list that differs
  // names who passed what, alike on every rank.
  EXPECT_EQ(count_occurrences(r.output,
                              "differ: InvalidArgument: add_process_set: the ranks "
                              "differ between ranks: rank 0 passed [0]; rank"),
            np)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "rank 0 outside: InvalidArgument: allreduce 'outside': "
                              "rank 0 is not in process set 1 (rank " +
                                  std::to_string(np - 1) + ")"),
            1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "rank 0 pending: Aborted: process set 2 was removed"), 1)
      << r.output;
}
INSTANTIATE_TEST_SUITE_P(Kolorun, Sets,
                         ::testing::Combine(::testing::Values("tcp", "shm"),
                                            ::testing::Values(2, 3, 4, 5)),
                         backend_and_ranks);

class Helpers : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(Helpers, GroupedGathersAndObjectsOnASetWithoutRankZero) {
  const auto [backend, np] = GetParam();
  auto r = run_command(kolorun(backend, np, "helpers"), 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "helpers passed"), np) << r.output;
  const std::string set = "process set 1 (rank" + std::string(np > 2 ? "s 1, 2" : " 1");
  EXPECT_EQ(count_occurrences(r.output,
                              "rank 0 grouped: InvalidArgument: allgather 'g': rank 0 "
                              "is not in " +
                                  set),
            1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "rank 0 object: InvalidArgument: broadcast 'obj.size': "
                              "rank 0 is not in " +
                                  set),
            1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "rank 0 far root: InvalidArgument: broadcast_object "
                              "'far': root must be a rank of " +
                                  set),
            1)
      << r.output;
}
INSTANTIATE_TEST_SUITE_P(Kolorun, Helpers,
                         ::testing::Combine(::testing::Values("tcp", "shm"),
                                            ::testing::Values(2, 3)),
                         backend_and_ranks);

// Point-to-point: p2p_worker's scenario, then the messages of its bad input, on every rank
// that made it.
class PointToPoint : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

void expect_p2p_messages(const kolo::testing::ProcessRun& r, int np) {
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "p2p passed"), np) << r.output;
  for (int me = 0; me < np; ++me) {
    const std::string rank = "rank " + std::to_string(me) + " ";
    EXPECT_EQ(count_occurrences(r.output, rank + "self: InvalidArgument: send 'self': dst " +
                                              std::to_string(me) +
                                              " is this rank; a rank cannot send to itself"),
              1)
        << r.output;
    EXPECT_EQ(count_occurrences(r.output, rank + "far: InvalidArgument: recv 'far': src " +
                                              std::to_string(np) +
                                              " is not a rank of the global process set, which "
                                              "has ranks 0.." +
                                              std::to_string(np - 1)),
              1)
        << r.output;
  }
  EXPECT_EQ(count_occurrences(r.output,
                              "rank 0 outside: InvalidArgument: send 'outside': rank 0 "
                              "is not in process set 1"),
            1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "beyond: InvalidArgument: send 'beyond': dst " +
                                            std::to_string(np - 1) +
                                            " is not a rank of process "
                                            "set 1"),
            np - 1)
      << r.output;
  // A recv of another shape: both ranks, each in its own words, with both shapes.
  const std::string shape = "shape differs across ranks: rank 0 has [4]; rank 1 has [5]";
  EXPECT_EQ(count_occurrences(r.output, "rank 0 shape: Mismatch: send 'mm' to rank 1: " + shape), 1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "rank 1 shape: Mismatch: recv 'mm' from rank 0: " + shape),
            1)
      << r.output;
  // Both ranks sending one name: the roots (senders) differ.
  const std::string root = "root differs across ranks: rank 0 has 0; rank 1 has 1";
  EXPECT_EQ(count_occurrences(r.output, "rank 0 both: Mismatch: send 'both' to rank 1: " + root), 1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output, "rank 1 both: Mismatch: send 'both' to rank 0: " + root), 1)
      << r.output;
}

TEST_P(PointToPoint, RingPairsThreadsSetsAndBadInput) {
  const auto [backend, np] = GetParam();
  expect_p2p_messages(run_command(kolorun(backend, np, "p2p", "", KOLO_TEST_P2P_WORKER), 120), np);
}
INSTANTIATE_TEST_SUITE_P(Kolorun, PointToPoint,
                         ::testing::Combine(::testing::Values("tcp", "shm"),
                                            ::testing::Values(2, 3, 4)),
                         backend_and_ranks);

TEST(PointToPoint, PeersThatShutDownFailTheirPendingTransfersNamingThem) {
  auto r = run_command(kolorun("tcp", 3, "gone", "", KOLO_TEST_P2P_WORKER), 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "gone passed"), 3) << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "rank 0 lonely: Aborted: send 'lonely' to rank 2: connecting ranks 0 "
                              "and 2 for point-to-point: rank 2 ended its Kolo session"),
            1)
      << r.output;
  EXPECT_EQ(count_occurrences(r.output,
                              "rank 0 never: Aborted: recv 'never' from rank 1: the point-to-point "
                              "pair of ranks 0 and 1 was removed (its rank 1 called shutdown())"),
            1)
      << r.output;
}

TEST(ProcessSets, StaticSetsFromTheEnvironment) {
  auto r = run_command(kolorun("tcp", 4, "static", "KOLO_PROCESS_SETS=\"0,1;2,3\" "), 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "static passed"), 4) << r.output;
}

TEST(ProcessSets, AnInvalidStaticSetFailsInitNamingIt) {
  auto bad = run_command(kolorun("tcp", 2, "static", "KOLO_PROCESS_SETS=\"0,0\" "), 60);
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("KOLO_PROCESS_SETS=0,0 is invalid: expected lists of ranks"),
            std::string::npos)
      << bad.output;
  auto range = run_command(kolorun("tcp", 2, "static", "KOLO_PROCESS_SETS=\"0,1;2,3\" "), 60);
  EXPECT_NE(range.exit_code, 0) << range.output;
  EXPECT_NE(range.output.find("KOLO_PROCESS_SETS=0,1;2,3: add_process_set: rank 2 in [2, 3] is "
                              "out of range: the job has ranks 0..1"),
            std::string::npos)
      << range.output;
}

#ifdef KOLO_TEST_MPIRUN
// mpi's sets are communicators of MPI_Comm_create_group.
class MpiSets : public ::testing::TestWithParam<int> {};
TEST_P(MpiSets, EveryOperationOnEveryShapeConcurrently) {
  const int np = GetParam();
  auto r =
      run_command("OMPI_MCA_btl_vader_single_copy_mechanism=none " + std::string(KOLO_TEST_MPIRUN) +
                      " --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " " +
                      KOLO_TEST_WORKER + " sets",
                  150);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "sets passed"), np) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Mpirun, MpiSets, ::testing::Values(2, 3, 4));

// mpi's pairs are communicators of MPI_Comm_create_group, created concurrently (a tag each).
class MpiPointToPoint : public ::testing::TestWithParam<int> {};
TEST_P(MpiPointToPoint, RingPairsThreadsSetsAndBadInput) {
  const int np = GetParam();
  expect_p2p_messages(
      run_command("OMPI_MCA_btl_vader_single_copy_mechanism=none " + std::string(KOLO_TEST_MPIRUN) +
                      " --allow-run-as-root --oversubscribe -np " + std::to_string(np) + " " +
                      KOLO_TEST_P2P_WORKER + " p2p",
                  120),
      np);
}
INSTANTIATE_TEST_SUITE_P(Mpirun, MpiPointToPoint, ::testing::Values(2, 3, 4));
#endif

}  // namespace
