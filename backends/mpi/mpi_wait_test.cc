// The poll schedule of mpi_wait.h, and wait_request on real MPI requests of an MPI singleton
// (this process alone, without mpirun). abort_job's path is exercised under mpirun by
// tests/faults (a frozen rank) and tests/coordinator (the stall-bounded control plane).
#include "backends/mpi/mpi_wait.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "backends/mpi/mpi_runtime.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

TEST(PollSchedule, TheSpinCoversASlowLinksTransferOfTheBytes) {
  EXPECT_EQ(poll_spin(0), nanoseconds(1ms));
  EXPECT_EQ(poll_spin(-5), nanoseconds(1ms));
  // 50 MB at 50 MB/s: one second on top of the base.
  EXPECT_EQ(poll_spin(50'000'000), nanoseconds(1001ms));
  EXPECT_EQ(poll_spin(16 << 20), nanoseconds(1ms) + nanoseconds(335'544'320));
}

TEST(PollSchedule, NoPauseWhileSpinningThenAnEighthOfTheLatenessBetweenTheBounds) {
  const nanoseconds spin = 1ms;
  EXPECT_EQ(poll_pause(spin, 0ns), 0ns);
  EXPECT_EQ(poll_pause(spin, spin - 1ns), 0ns);
  EXPECT_EQ(poll_pause(spin, spin), nanoseconds(kMinPause));  // 0 / 8, raised to the floor
  EXPECT_EQ(poll_pause(spin, spin + 80us), nanoseconds(10us));
  EXPECT_EQ(poll_pause(spin, spin + 800us), nanoseconds(100us));
  EXPECT_EQ(poll_pause(spin, spin + 8ms), nanoseconds(1ms));
  EXPECT_EQ(poll_pause(spin, spin + 1h), nanoseconds(kMaxPause));
}

// "MpiSingleton" in the name: like the jobs under mpirun, these run in the asan check without
// the leak check (scripts/run-checks.sh), since Open MPI's leaks cannot be told from Kolo's.
class MpiSingleton : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ensure_mpi().ok()); }
};

TEST_F(MpiSingleton, ACompletedRequestIsReleased) {
  int sent = 42, received = 0;
  MPI_Request send = MPI_REQUEST_NULL, recv = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Irecv(&received, 1, MPI_INT, 0, 7, MPI_COMM_SELF, &recv), MPI_SUCCESS);
  ASSERT_EQ(MPI_Isend(&sent, 1, MPI_INT, 0, 7, MPI_COMM_SELF, &send), MPI_SUCCESS);
  EXPECT_TRUE(wait_request(recv, sizeof(int), 10s).ok());
  EXPECT_TRUE(wait_request(send, sizeof(int), 10s).ok());
  EXPECT_EQ(recv, MPI_REQUEST_NULL);
  EXPECT_EQ(send, MPI_REQUEST_NULL);
  EXPECT_EQ(received, 42);
}

TEST_F(MpiSingleton, ANonblockingCollectiveCompletes) {
  const int64_t in[3] = {1, 2, 3};
  int64_t out[3] = {};
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Iallreduce(in, out, 3, MPI_INT64_T, MPI_SUM, MPI_COMM_SELF, &request), MPI_SUCCESS);
  EXPECT_TRUE(wait_request(request, sizeof in, 10s).ok());
  EXPECT_EQ(std::vector<int64_t>(out, out + 3), (std::vector<int64_t>{1, 2, 3}));
}

// A receive nobody sends to is a peer that never comes: the wait ends at the deadline, not
// before, naming it, and leaves the request in flight (a receive, unlike a collective, can
// then be cancelled, which this test does to clean up).
TEST_F(MpiSingleton, ARequestThatNeverCompletesTimesOutAtTheDeadline) {
  int never = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Irecv(&never, 1, MPI_INT, 0, 99, MPI_COMM_SELF, &request), MPI_SUCCESS);
  const auto start = std::chrono::steady_clock::now();
  Status st = wait_request(request, sizeof(int), 50ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.to_string();
  EXPECT_EQ(st.message(), "did not complete within 50.0 ms");
  ASSERT_NE(request, MPI_REQUEST_NULL);
  MPI_Cancel(&request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

}  // namespace
}  // namespace kolo
