// agree_on_ranks: add_process_set's verdict on every rank's list (the multi-process tests in
// tests/process_sets run the whole path).
#include "coordinator/process_sets.h"

#include <gtest/gtest.h>

namespace kolo::coord {
namespace {

std::string error(const std::vector<std::vector<int>>& lists) {
  Result<std::vector<int>> r = agree_on_ranks(lists);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().to_string();
}

TEST(AgreeOnRanks, TheSameListInAnyOrderGivesTheMembersAscending) {
  Result<std::vector<int>> r = agree_on_ranks({{3, 1}, {1, 3}, {3, 1}, {3, 1}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, (std::vector<int>{1, 3}));
  Result<std::vector<int>> one = agree_on_ranks({{0}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<int>{0});
}

TEST(AgreeOnRanks, ListsThatDifferNameWhoPassedWhat) {
  EXPECT_EQ(error({{0, 1}, {0, 1}, {0, 2}, {0, 1}}),
            "InvalidArgument: add_process_set: the ranks differ between ranks: ranks 0, 1, 3 "
            "passed [0, 1]; rank 2 passed [0, 2]");
  EXPECT_EQ(error({{0}, {}, {1}}),
            "InvalidArgument: add_process_set: the ranks differ between ranks: rank 0 passed "
            "[0]; rank 1 passed []; rank 2 passed [1]");
}

TEST(AgreeOnRanks, DuplicatesOutOfRangeAndEmptyListsAreNamed) {
  EXPECT_EQ(error({{1, 0, 1}, {1, 0, 1}}),
            "InvalidArgument: add_process_set: rank 1 appears more than once in [1, 0, 1]");
  EXPECT_EQ(error({{0, 2}, {0, 2}}),
            "InvalidArgument: add_process_set: rank 2 in [0, 2] is out of range: the job has "
            "ranks 0..1");
  EXPECT_EQ(error({{-1}, {-1}}),
            "InvalidArgument: add_process_set: rank -1 in [-1] is out of range: the job has "
            "ranks 0..1");
  EXPECT_EQ(error({{}, {}}), "InvalidArgument: add_process_set: the list of ranks is empty");
}

}  // namespace
}  // namespace kolo::coord
