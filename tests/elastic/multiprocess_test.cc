// Starts elastic_worker jobs through kolorun (tcp, shm; 2 and 3 ranks) and checks every rank's
// output: commit/restore exactness, sync to the newest commit, and the mismatch errors, which
// must name the key, what each rank registered and the ranks, alike on every rank.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "tests/support/run_command.h"

namespace {

using kolo::testing::count_occurrences;
using kolo::testing::run_command;

std::string kolorun(const std::string& backend, int np, const std::string& scenario) {
  return "KOLO_CPU_OPERATIONS=" + backend + " " + KOLO_TEST_KOLORUN + " -np " + std::to_string(np) +
         " " + KOLO_TEST_WORKER + " " + scenario;
}

std::string backend_and_ranks(const ::testing::TestParamInfo<std::tuple<const char*, int>>& info) {
  return std::string(std::get<0>(info.param)) + "_np" + std::to_string(std::get<1>(info.param));
}

class Elastic : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(Elastic, CommitModifyRestoreGivesTheExactBytesBack) {
  const auto [backend, np] = GetParam();
  auto r = run_command(kolorun(backend, np, "roundtrip"), 90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "roundtrip passed"), np) << r.output;
}

TEST_P(Elastic, SyncMakesEveryRankEqualToTheNewestCommit) {
  const auto [backend, np] = GetParam();
  auto r = run_command(kolorun(backend, np, "sync"), 90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "sync passed"), np) << r.output;
}

TEST_P(Elastic, AMismatchNamesKeyAndRanksOnEveryRank) {
  const auto [backend, np] = GetParam();
  auto r = run_command(kolorun(backend, np, "mismatch"), 90);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "mismatch passed"), np) << r.output;
  const std::string prefix = "Mismatch: elastic::State '";
  const std::string rule =
      ". Every rank must register the same keys with the same kinds, dtypes and shapes";
  const std::string commit =
      np == 2 ? "key 'w': rank 0 registered tensor float32 [4, 3]; rank 1 registered tensor "
                "float32 [4, 4]"
              : "key 'extra': ranks 0, 1 registered nothing; rank 2 registered counter (and 1 "
                "more keys differ)";
  EXPECT_EQ(count_occurrences(r.output,
                              " mismatch: " + prefix +
                                  "mm': the ranks registered different entries: " + commit + rule),
            np)
      << r.output;
  const std::string kinds = np == 2
                                ? "key 'pos': rank 0 registered counter; rank 1 registered bytes"
                                : "key 'pos': ranks 0, 2 registered counter; rank 1 "
                                  "registered bytes";
  EXPECT_EQ(count_occurrences(
                r.output, "sync mismatch: " + prefix +
                              "kinds': the ranks registered different entries: " + kinds + rule),
            np)
      << r.output;
}

INSTANTIATE_TEST_SUITE_P(Kolorun, Elastic,
                         ::testing::Combine(::testing::Values("tcp", "shm"),
                                            ::testing::Values(2, 3)),
                         backend_and_ranks);

}  // namespace
