// NodeRoster and NodeLink over one MemoryStore: orders and events in order, late nodes, node
// names, a node lost after kNodeLossBound without a beat, the driver's word. The real thing, two
// kolorun in two network namespaces, is tests/elastic/two_hosts_test.cc.
#include "tools/kolorun/elastic_nodes.h"

#include <gtest/gtest.h>

#include "rendezvous/elastic_plan.h"
#include "rendezvous/memory_store.h"

namespace kolo::kolorun {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class ElasticNodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_.set(node_host_key(1), "h1").ok());
    ASSERT_TRUE(roster_.add_initial(2, 2, t0_).ok());
  }
  MemoryStore store_;
  NodeRoster roster_{store_, "h0", 2};
  Clock::time_point t0_ = Clock::now();
};

TEST_F(ElasticNodesTest, OrdersReachTheNodeInOrder) {
  NodeLink link(store_, 1);
  ASSERT_TRUE(roster_.order(1, {true, 2}).ok());
  ASSERT_TRUE(roster_.order(1, {true, 3}).ok());
  auto first = link.take_orders();
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].worker, 2);
  EXPECT_TRUE((*first)[1].start);
  ASSERT_TRUE(roster_.order(1, {false, 3}).ok());
  auto second = link.take_orders();
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->size(), 1u);
  EXPECT_FALSE((*second)[0].start);
  EXPECT_EQ((*second)[0].worker, 3);
}

TEST_F(ElasticNodesTest, EventsReachNodeZeroWithTheirText) {
  NodeLink link(store_, 1);
  ASSERT_TRUE(link.report({3, false, false, "was killed by signal 9 (SIGKILL)"}).ok());
  ASSERT_TRUE(link.report({2, true, true, "exited with status 0"}).ok());
  auto news = roster_.poll(t0_);
  ASSERT_TRUE(news.ok());
  ASSERT_EQ(news->exits.size(), 2u);
  EXPECT_EQ(news->exits[0].first, 1);
  EXPECT_EQ(news->exits[0].second.worker, 3);
  EXPECT_FALSE(news->exits[0].second.clean);
  EXPECT_EQ(news->exits[0].second.how, "was killed by signal 9 (SIGKILL)");
  EXPECT_TRUE(news->exits[1].second.stopped);
  EXPECT_TRUE(roster_.poll(t0_)->exits.empty());  // each once
}

TEST_F(ElasticNodesTest, ANodeWithoutABeatIsLostOnceAfterTheBound) {
  NodeLink link(store_, 1);
  ASSERT_TRUE(link.beat(t0_).ok());
  EXPECT_TRUE(roster_.poll(t0_)->lost.empty());
  EXPECT_TRUE(roster_.poll(t0_ + kNodeLossBound - 100ms)->lost.empty());
  auto news = roster_.poll(t0_ + kNodeLossBound + 200ms);
  ASSERT_TRUE(news.ok());
  EXPECT_EQ(news->lost, std::vector<int>{1});
  EXPECT_TRUE(roster_.nodes().at(1).lost);
  EXPECT_TRUE(roster_.poll(t0_ + 3 * kNodeLossBound)->lost.empty());
}

TEST_F(ElasticNodesTest, ANodeThatSaidItWasLeavingLeftRatherThanWasLost) {
  NodeLink link(store_, 1);
  ASSERT_TRUE(link.beat(t0_).ok());
  ASSERT_TRUE(roster_.poll(t0_).ok());
  link.done();
  auto news = roster_.poll(t0_ + kNodeLossBound + 200ms);
  ASSERT_TRUE(news.ok());
  EXPECT_TRUE(news->lost.empty());
  EXPECT_EQ(news->left, std::vector<int>{1});
}

TEST_F(ElasticNodesTest, ABeatingNodeIsNotLost) {
  NodeLink link(store_, 1);
  for (auto t = t0_; t < t0_ + 3 * kNodeLossBound; t += kBeatEvery) {
    ASSERT_TRUE(link.beat(t).ok());
    auto news = roster_.poll(t);
    ASSERT_TRUE(news.ok());
    EXPECT_TRUE(news->lost.empty());
  }
}

TEST_F(ElasticNodesTest, ALateNodeRegistersAndIsNamedApartFromANodeOfTheSameHost) {
  ASSERT_TRUE(store_.set(node_host_key(2), "h0").ok());  // node 0's hostname
  NodeLink link(store_, 2);
  ASSERT_TRUE(link.register_late(3).ok());
  auto news = roster_.poll(t0_);
  ASSERT_TRUE(news.ok());
  EXPECT_EQ(news->joined, std::vector<int>{2});
  EXPECT_EQ(roster_.nodes().at(2).np, 3);
  EXPECT_EQ(roster_.name_of(2), "h0/node2");
  EXPECT_EQ(roster_.name_of(1), "h1");
  EXPECT_TRUE(roster_.poll(t0_)->joined.empty());
}

TEST_F(ElasticNodesTest, TheNodeReadsItWasGivenUpTheEndAndTheJobsStatus) {
  NodeLink link(store_, 1);
  auto quiet = link.read_word();
  ASSERT_TRUE(quiet.ok());
  EXPECT_FALSE(quiet->lost || quiet->over || quiet->end);
  ASSERT_TRUE(roster_.give_up(1, "kolorun: node 0 gave this node up").ok());
  ASSERT_TRUE(store_.set(elastic_protocol::kEndKey, "kolorun: too few").ok());
  link.done();
  ASSERT_TRUE(roster_.finish(1, 1s).ok());
  auto word = link.read_word();
  ASSERT_TRUE(word.ok());
  EXPECT_EQ(word->lost, "kolorun: node 0 gave this node up");
  EXPECT_EQ(word->end, "kolorun: too few");
  EXPECT_EQ(word->over, 1);
}

TEST_F(ElasticNodesTest, NodeZeroWaitsBoundedForTheNodesToLeave) {
  auto s = roster_.finish(0, 50ms);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.message();
  EXPECT_NE(s.message().find("kolorun/elastic/node/1/done"), std::string::npos) << s.message();
}

TEST_F(ElasticNodesTest, DiscoveredSlotsGoToTheNodesThatRunThereUpToMaxNp) {
  ASSERT_TRUE(store_.set(node_host_key(2), "h0").ok());
  ASSERT_TRUE(NodeLink(store_, 2).register_late(2).ok());
  ASSERT_TRUE(roster_.poll(t0_).ok());  // nodes 0 "h0", 1 "h1", 2 "h0/node2"
  NodeTargets t = node_targets({{"localhost", 2}, {"h0/node2", 3}, {"h9", 4}}, roster_.nodes(), 4);
  EXPECT_EQ(t.workers, (std::map<int, int>{{0, 2}, {1, 0}, {2, 2}}));  // capped at 4 in all
  EXPECT_EQ(t.total, 4);
  EXPECT_EQ(t.listed, 5);
  EXPECT_EQ(t.unclaimed, std::vector<std::string>{"h9"});
  ASSERT_TRUE(roster_.give_up(1, "gone").ok());
  t = node_targets({{"h0", 1}, {"h1", 2}}, roster_.nodes(), 8);
  EXPECT_EQ(t.workers, (std::map<int, int>{{0, 1}, {1, 0}, {2, 0}}));  // a lost node: nothing
  EXPECT_EQ(t.unclaimed, std::vector<std::string>{"h1"});
}

}  // namespace
}  // namespace kolo::kolorun
