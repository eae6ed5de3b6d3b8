#include "rendezvous/elastic_plan.h"

#include <gtest/gtest.h>

namespace kolo::elastic_protocol {
namespace {

TEST(ElasticPlan, GroupsRanksByHostInOrderOfFirstAppearance) {
  auto plan = make_plan(3, {{4, "a"}, {7, "b"}, {2, "a"}, {9, "c"}});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_EQ(plan->size(), 4);
  EXPECT_EQ(plan->workers_text(), "4, 2, 7, 9");
  EXPECT_EQ(plan->members[1], (PlanMember{2, "a", 1, 2, 0, 3}));
  EXPECT_EQ(plan->members[2], (PlanMember{7, "b", 0, 1, 1, 3}));
  EXPECT_EQ(plan->members[3], (PlanMember{9, "c", 0, 1, 2, 3}));
  EXPECT_EQ(plan->rank_of(7), 2);
  EXPECT_EQ(plan->rank_of(5), std::nullopt);
}

TEST(ElasticPlan, EncodesAndParsesBack) {
  auto plan = make_plan(12, {{0, "n0"}, {1, "n0"}, {5, "n1"}});
  ASSERT_TRUE(plan.ok());
  const std::string text = plan->encode();
  EXPECT_EQ(text,
            "kolo-elastic-plan 1 generation 12 size 3\n"
            "rank 0 worker 0 host n0 local 0/2 cross 0/2\n"
            "rank 1 worker 1 host n0 local 1/2 cross 0/2\n"
            "rank 2 worker 5 host n1 local 0/1 cross 1/2\n");
  auto back = Plan::parse(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->generation, 12);
  EXPECT_EQ(back->members, plan->members);
}

TEST(ElasticPlan, RefusesWhatIsNotAWorld) {
  EXPECT_EQ(make_plan(0, {}).status().code(), StatusCode::kInvalidArgument);
  auto twice = make_plan(0, {{1, "a"}, {1, "b"}});
  EXPECT_EQ(twice.status().message(), "elastic plan of generation 0: worker 1 given twice");
  EXPECT_NE(make_plan(0, {{1, "a b"}}).status().message().find("host 'a b'"), std::string::npos);
}

TEST(ElasticPlan, ParseNamesTheBadLine) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"", "elastic plan: empty"},
      {"kolo-elastic-plan 2 generation 0 size 1\nrank 0 worker 0 host a local 0/1 cross 0/1",
       "elastic plan line 1 'kolo-elastic-plan 2 generation 0 size 1': expected "
       "'kolo-elastic-plan 1 generation <G> size <S>'"},
      {"kolo-elastic-plan 1 generation 0 size 2\nrank 0 worker 0 host a local 0/1 cross 0/1",
       "elastic plan line 1 'kolo-elastic-plan 1 generation 0 size 2': expected "
       "'kolo-elastic-plan 1 generation <G> size <S>' with S > 0 rank lines after it (there are "
       "1)"},
      {"kolo-elastic-plan 1 generation 0 size 1\nrank 1 worker 0 host a local 0/1 cross 0/1",
       "elastic plan line 2 'rank 1 worker 0 host a local 0/1 cross 0/1': expected rank 0"},
      {"kolo-elastic-plan 1 generation 0 size 1\nrank 0 worker 0 host a local 1/1 cross 0/1",
       "elastic plan line 2 'rank 0 worker 0 host a local 1/1 cross 0/1': expected coordinates "
       "'<rank>/<size>' with 0 <= rank < size"},
      {"kolo-elastic-plan 1 generation 0 size 2\nrank 0 worker 3 host a local 0/2 cross 0/1\n"
       "rank 1 worker 3 host a local 1/2 cross 0/1",
       "elastic plan line 3 'rank 1 worker 3 host a local 1/2 cross 0/1': expected a worker not "
       "named before (worker 3 is twice)"},
  };
  for (const Case& c : cases) {
    auto plan = Plan::parse(c.text);
    ASSERT_FALSE(plan.ok()) << c.text;
    EXPECT_EQ(plan.status().message(), c.message);
  }
}

TEST(ElasticPlan, KeysAreNamespacedByGenerationAndWorker) {
  EXPECT_EQ(plan_key(3), "kolo/elastic/g3/plan");
  EXPECT_EQ(reform_key(3), "kolo/elastic/g3/reform");
  EXPECT_EQ(ready_key(11), "kolo/elastic/ready/11");
  EXPECT_EQ(exit_key(11), "kolo/elastic/exit/11");
  EXPECT_EQ(joined_key(3, 11), "kolo/elastic/g3/joined/11");
  EXPECT_EQ(generation_prefix(3), "kolo/g3");
}

}  // namespace
}  // namespace kolo::elastic_protocol
