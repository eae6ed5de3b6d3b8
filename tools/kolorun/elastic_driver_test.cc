// The driver's decisions over an in-process store, without processes: what each generation's
// plan says, which requests count, and the end message word for word.
#include "tools/kolorun/elastic_driver.h"

#include <gtest/gtest.h>

#include "rendezvous/memory_store.h"

namespace kolo::kolorun {
namespace {

namespace ep = elastic_protocol;
using namespace std::chrono_literals;
using Clock = ElasticDriver::Clock;

const std::string kKill = "was killed by signal 9 (SIGKILL)";

class ElasticDriverTest : public ::testing::Test {
 protected:
  void start(int np, DriverOptions options) {
    driver_ = std::make_unique<ElasticDriver>(store_, options);
    std::vector<std::pair<int64_t, std::string>> workers;
    for (int w = 0; w < np; ++w) workers.emplace_back(w, "localhost");
    ASSERT_TRUE(driver_->start(workers).ok());
  }
  int64_t published_generation() {
    auto g = store_.add(ep::kGenerationKey, 0);
    EXPECT_TRUE(g.ok());
    return g.ok() ? *g : -1;
  }
  // The workers of generation g's stored plan, in rank order.
  std::vector<int64_t> members(int64_t g) {
    auto text = store_.get(ep::plan_key(g), 0ms);
    EXPECT_TRUE(text.ok()) << "no plan of generation " << g;
    if (!text.ok()) return {};
    auto plan = ep::Plan::parse(*text);
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    std::vector<int64_t> out;
    for (const auto& m : plan->members) out.push_back(m.worker);
    return out;
  }
  void step(Clock::time_point now = Clock::now()) {
    Status s = driver_->step(now);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  MemoryStore store_;
  std::unique_ptr<ElasticDriver> driver_;
};

TEST_F(ElasticDriverTest, GenerationZeroIsPublishedBeforeAnythingElse) {
  start(4, {.min_np = 2, .max_np = 4});
  EXPECT_EQ(published_generation(), 0);
  EXPECT_EQ(members(0), (std::vector<int64_t>{0, 1, 2, 3}));
  step();  // nothing happened: nothing new
  EXPECT_EQ(published_generation(), 0);
  EXPECT_EQ(driver_->state_of(2), WorkerState::kMember);
}

TEST_F(ElasticDriverTest, ADeadMemberFormsTheNextGenerationOfTheSurvivorsInRankOrder) {
  start(4, {.min_np = 2, .max_np = 4});
  driver_->on_exit(1, /*clean=*/false, kKill, /*stopped=*/false);
  step();
  EXPECT_EQ(published_generation(), 1);
  EXPECT_EQ(members(1), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(driver_->plan().rank_of(3), 2);
  // A member that kolorun stopped (fewer slots) leaves too, without counting as a failure.
  driver_->on_exit(0, false, "was killed by signal 15 (SIGTERM)", /*stopped=*/true);
  step();
  EXPECT_EQ(members(2), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(driver_->end_message());
}

TEST_F(ElasticDriverTest, OnlyARequestOfTheNewestGenerationReforms) {
  start(3, {.min_np = 1, .max_np = 3});
  driver_->on_exit(2, false, "exited with status 1", false);
  step();
  ASSERT_EQ(published_generation(), 1);
  // A survivor of generation 0 asks late: generation 1 already exists, so the request is stale.
  ASSERT_TRUE(store_.add(ep::reform_key(0), 1).ok());
  step();
  EXPECT_EQ(published_generation(), 1);
  // A rank of generation 1 asks: generation 2, the same live workers.
  ASSERT_TRUE(store_.add(ep::reform_key(1), 1).ok());
  step();
  EXPECT_EQ(published_generation(), 2);
  EXPECT_EQ(members(2), (std::vector<int64_t>{0, 1}));
  step();  // that request was answered
  EXPECT_EQ(published_generation(), 2);
}

TEST_F(ElasticDriverTest, ReadyWorkersJoinAfterTheMembersAndStartingOnesAreWaitedForABatch) {
  start(2, {.min_np = 1, .max_np = 5, .blacklist_after = 3, .join_batch = 500ms});
  const auto t0 = Clock::now();
  driver_->add_worker(2, "localhost");
  driver_->add_worker(3, "localhost");
  step(t0);
  EXPECT_EQ(published_generation(), 0);  // not ready yet
  EXPECT_EQ(driver_->state_of(2), WorkerState::kStarting);
  ASSERT_TRUE(store_.set(ep::ready_key(3), "1").ok());
  step(t0);
  EXPECT_EQ(driver_->state_of(3), WorkerState::kReady);
  EXPECT_EQ(published_generation(), 0);  // worker 2 is still starting: wait for it a while
  step(t0 + 200ms);
  EXPECT_EQ(published_generation(), 0);
  step(t0 + 500ms);  // the batch's wait is over: 3 joins alone
  EXPECT_EQ(published_generation(), 1);
  EXPECT_EQ(members(1), (std::vector<int64_t>{0, 1, 3}));
  ASSERT_TRUE(store_.set(ep::ready_key(2), "1").ok());
  step(t0 + 600ms);  // nobody else starting: at once
  EXPECT_EQ(members(2), (std::vector<int64_t>{0, 1, 3, 2}));
}

TEST_F(ElasticDriverTest, AGenerationSmallerThanMinNpWaitsForTheReplacement) {
  start(3, {.min_np = 3, .max_np = 3});
  driver_->on_exit(0, false, kKill, false);
  driver_->add_worker(3, "localhost");  // --respawn's replacement
  step();
  EXPECT_EQ(published_generation(), 0);  // 2 ready, 3 live: wait
  EXPECT_FALSE(driver_->end_message());
  ASSERT_TRUE(store_.set(ep::ready_key(3), "1").ok());
  step();
  EXPECT_EQ(published_generation(), 1);
  EXPECT_EQ(members(1), (std::vector<int64_t>{1, 2, 3}));
}

TEST_F(ElasticDriverTest, FewerThanMinNpEndsTheJobNamingTheLostAndTheSurvivors) {
  start(4, {.min_np = 2, .max_np = 4});
  driver_->on_exit(2, false, kKill, false);
  step();
  ASSERT_EQ(members(1), (std::vector<int64_t>{0, 1, 3}));
  driver_->on_exit(3, false, "exited with status 1", false);
  driver_->on_exit(1, false, kKill, false);
  step();
  const std::string expected =
      "kolorun: 1 rank left, fewer than --min-np 2: lost worker 1 (rank 1 of generation 1, was "
      "killed by signal 9 (SIGKILL)), worker 2 (rank 2 of generation 0, was killed by signal 9 "
      "(SIGKILL)) and worker 3 (rank 2 of generation 1, exited with status 1); survivors: worker "
      "0 (rank 0)";
  ASSERT_TRUE(driver_->end_message());
  EXPECT_EQ(*driver_->end_message(), expected);
  auto stored = store_.get(ep::kEndKey, 0ms);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(*stored, expected);
  EXPECT_EQ(published_generation(), 1);  // nothing formed after the end
  EXPECT_FALSE(driver_->may_start_on("localhost"));
  EXPECT_FALSE(driver_->succeeded());
}

TEST_F(ElasticDriverTest, AHostIsBlacklistedAfterItsWorkersFailedKTimes) {
  start(4, {.min_np = 1, .max_np = 4, .blacklist_after = 2});
  driver_->on_exit(0, false, "was killed by signal 15 (SIGTERM)", /*stopped=*/true);
  EXPECT_TRUE(driver_->may_start_on("localhost"));
  driver_->on_exit(1, false, kKill, false);
  EXPECT_FALSE(driver_->blacklisted("localhost"));
  EXPECT_TRUE(driver_->may_start_on("localhost"));
  driver_->on_exit(2, false, "exited with status 3", false);
  EXPECT_TRUE(driver_->blacklisted("localhost"));
  EXPECT_FALSE(driver_->may_start_on("localhost"));
  EXPECT_FALSE(driver_->blacklisted("otherhost"));
}

TEST_F(ElasticDriverTest, NoMoreThanMaxNpLiveWorkers) {
  start(2, {.min_np = 1, .max_np = 3});
  EXPECT_TRUE(driver_->may_start_on("localhost"));
  driver_->add_worker(2, "localhost");
  EXPECT_EQ(driver_->live_count(), 3);
  EXPECT_FALSE(driver_->may_start_on("localhost"));
}

TEST_F(ElasticDriverTest, AJobSucceedsWhenEveryMemberOfTheLastGenerationExitsZero) {
  start(3, {.min_np = 2, .max_np = 3});
  driver_->on_exit(1, false, kKill, false);
  step();
  ASSERT_EQ(members(1), (std::vector<int64_t>{0, 2}));
  driver_->on_exit(0, true, "exited with status 0", false);
  step();
  EXPECT_FALSE(driver_->end_message());  // 1 live < --min-np 2, but the job is finishing
  EXPECT_FALSE(driver_->may_start_on("localhost"));
  EXPECT_FALSE(driver_->finished());
  driver_->on_exit(2, true, "exited with status 0", false);
  EXPECT_TRUE(driver_->finished());
  EXPECT_TRUE(driver_->succeeded());
}

TEST_F(ElasticDriverTest, AFailureAfterAMemberFinishedEndsTheJob) {
  start(3, {.min_np = 1, .max_np = 3});
  driver_->on_exit(0, true, "exited with status 0", false);
  driver_->on_exit(2, false, kKill, false);
  step();
  ASSERT_TRUE(driver_->end_message());
  EXPECT_EQ(*driver_->end_message(),
            "kolorun: the world broke after worker 0 (rank 0 of generation 0) had finished "
            "(exited with status 0), and a finishing job is not re-formed: lost worker 2 (rank 2 "
            "of generation 0, was killed by signal 9 (SIGKILL)); survivors: worker 1 (rank 1)");
  EXPECT_EQ(published_generation(), 0);
}

TEST_F(ElasticDriverTest, AMemberKolorunStoppedLeavesEvenWhenItExitsZero) {
  start(3, {.min_np = 1, .max_np = 3});
  // A SIGTERM handler that exits 0: a departure, not the job finishing.
  driver_->on_exit(2, /*clean=*/true, "exited with status 0", /*stopped=*/true);
  step();
  EXPECT_EQ(members(1), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(driver_->may_start_on("localhost"));
  EXPECT_FALSE(driver_->blacklisted("localhost"));
}

TEST_F(ElasticDriverTest, AJoinerThatExitsBeforeItIsNamedIsNotInTheNextGeneration) {
  start(2, {.min_np = 1, .max_np = 4});
  driver_->add_worker(2, "localhost");
  ASSERT_TRUE(store_.set(ep::ready_key(2), "1").ok());
  driver_->on_exit(2, false, "exited with status 1", false);
  step();
  EXPECT_EQ(published_generation(), 0);  // nothing to re-form: no member left
  EXPECT_EQ(driver_->state_of(2), WorkerState::kExited);
}

TEST_F(ElasticDriverTest, AStuckMemberIsHandedOverOnceAndLeftOutOfTheNextGeneration) {
  start(4, {.min_np = 2, .max_np = 4});
  step();
  EXPECT_TRUE(driver_->take_stuck().empty());
  // Rank 0's stall inspector gave up on worker 2; the others' operations failed and they ask.
  ASSERT_TRUE(store_.set(ep::stuck_key(0), "2").ok());
  ASSERT_TRUE(store_.add(ep::reform_key(0), 1).ok());
  step();
  EXPECT_EQ(driver_->take_stuck(), (std::vector<int64_t>{2}));
  EXPECT_TRUE(driver_->take_stuck().empty());  // once
  EXPECT_EQ(published_generation(), 1);
  EXPECT_EQ(members(1), (std::vector<int64_t>{0, 1, 3}));
  // Then the supervisor's SIGKILL: a failure, and no further generation for it.
  driver_->on_exit(2, false, kKill, false);
  step();
  EXPECT_EQ(published_generation(), 1);
  EXPECT_FALSE(driver_->end_message());
}

TEST(JoinAnd, ListsLikeASentence) {
  EXPECT_EQ(join_and({}), "");
  EXPECT_EQ(join_and({"a"}), "a");
  EXPECT_EQ(join_and({"a", "b"}), "a and b");
  EXPECT_EQ(join_and({"a", "b", "c"}), "a, b and c");
}

}  // namespace
}  // namespace kolo::kolorun
