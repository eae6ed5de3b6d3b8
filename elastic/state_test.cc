// kolo::elastic::State in one process: registration errors, the before-init errors, and commit,
// restore and sync on a world of one rank (kolo::init() without a launcher). The collectives
// across ranks are tested with real ranks in tests/elastic (the State uses the global API, one
// job per process, so ranks cannot be threads here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace kolo::elastic {
namespace {

bool has(const Status& st, const std::string& part) {
  return st.message().find(part) != std::string::npos;
}

TEST(ElasticState, RegistrationErrorsNameTheKey) {
  State s("reg");
  std::vector<float> w(6, 1.0f);
  int64_t step = 0;
  std::string blob;
  ASSERT_TRUE(s.add_tensor("w", view_of(w.data(), {2, 3})).ok());
  Status st = s.add_counter("w", &step);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "elastic::State 'reg': key 'w' is already registered");
  EXPECT_EQ(s.add_bytes("", &blob).code(), StatusCode::kInvalidArgument);
  st = s.add_bytes("b", nullptr);
  EXPECT_EQ(st.message(), "elastic::State 'reg': key 'b': the byte string is a null pointer");
  st = s.add_counter("c", nullptr);
  EXPECT_EQ(st.message(), "elastic::State 'reg': key 'c': the counter is a null pointer");
  st = s.add_tensor("neg", view_of(w.data(), {2, -3}));
  EXPECT_EQ(st.message(),
            "elastic::State 'reg': key 'neg' has a negative dimension: shape [2, -3]");
  st = s.add_tensor("null", view_of(static_cast<float*>(nullptr), {4}));
  EXPECT_EQ(st.message(), "elastic::State 'reg': key 'null' has null data and 4 elements");
  EXPECT_TRUE(s.add_tensor("empty", view_of(static_cast<float*>(nullptr), {0})).ok());
  TensorView gpu = view_of(w.data(), {6});
  gpu.device = Device::cuda(1);
  st = s.add_tensor("gpu", gpu);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_TRUE(has(st, "key 'gpu' is a tensor on cuda:1: a State holds CPU tensors only"))
      << st.to_string();
}

TEST(ElasticState, CommitAndSyncBeforeInitFailRestoreWithoutCommitFails) {
  ASSERT_FALSE(is_initialized());
  State s;
  int64_t step = 3;
  ASSERT_TRUE(s.add_counter("step", &step).ok());
  for (Status st : {s.commit(), s.sync()}) {
    EXPECT_EQ(st.code(), StatusCode::kPreconditionFailed);
    EXPECT_TRUE(has(st, "elastic::State 'state': ")) << st.to_string();
    EXPECT_TRUE(has(st, " before kolo::init()")) << st.to_string();
  }
  EXPECT_EQ(s.commit().message(),
            "elastic::State 'state': commit() before kolo::init(): it is collective and needs the "
            "job");
  Status st = s.restore();
  EXPECT_EQ(st.code(), StatusCode::kPreconditionFailed);
  EXPECT_EQ(st.message(), "elastic::State 'state': restore() before any commit() or sync()");
  EXPECT_EQ(s.commits(), 0);
  EXPECT_EQ(step, 3);
  // Nothing was fixed: registration is still open.
  EXPECT_TRUE(s.add_counter("epoch", &step).ok());
}

class ElasticStateInitialized : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(init().ok()); }
  void TearDown() override { EXPECT_TRUE(shutdown().ok()); }
};

TEST_F(ElasticStateInitialized, CommitModifyRestoreGivesTheExactBytesBack) {
  State s;
  std::vector<float> w = {1.5f, -2.25f, 3.0f, 0.1f, 1e-30f, -0.0f};
  std::vector<int64_t> ids = {7, -1, INT64_MAX};
  std::vector<uint8_t> raw(5, 0xab);
  int64_t step = 41, epoch = 2;
  std::string rng = std::string("seed\0state", 10);
  ASSERT_TRUE(s.add_tensor("w", view_of(w.data(), {2, 3})).ok());
  ASSERT_TRUE(s.add_tensor("ids", view_of(ids.data(), {3})).ok());
  ASSERT_TRUE(s.add_tensor("raw", view_of(raw.data(), {5})).ok());
  ASSERT_TRUE(s.add_counter("step", &step).ok());
  ASSERT_TRUE(s.add_counter("epoch", &epoch).ok());
  ASSERT_TRUE(s.add_bytes("rng", &rng).ok());
  ASSERT_TRUE(s.commit().ok());
  EXPECT_EQ(s.commits(), 1);
  const std::vector<float> w0 = w;
  const std::vector<int64_t> ids0 = ids;
  w.assign(6, 9.0f);
  ids.assign(3, 0);
  raw.assign(5, 0);
  step = 99;
  epoch = 5;
  rng = "a longer string than before";
  ASSERT_TRUE(s.restore().ok());
  EXPECT_EQ(std::memcmp(w.data(), w0.data(), w.size() * sizeof(float)), 0);
  EXPECT_EQ(ids, ids0);
  EXPECT_EQ(raw, std::vector<uint8_t>(5, 0xab));
  EXPECT_EQ(step, 41);
  EXPECT_EQ(epoch, 2);
  EXPECT_EQ(rng, std::string("seed\0state", 10));
  // A second commit replaces the first; restore is repeatable.
  step = 50;
  ASSERT_TRUE(s.commit().ok());
  EXPECT_EQ(s.commits(), 2);
  step = 51;
  ASSERT_TRUE(s.restore().ok());
  ASSERT_TRUE(s.restore().ok());
  EXPECT_EQ(step, 50);
}

TEST_F(ElasticStateInitialized, RegistrationClosesAtTheFirstCommit) {
  State s;
  int64_t a = 1, b = 2;
  ASSERT_TRUE(s.add_counter("a", &a).ok());
  ASSERT_TRUE(s.commit().ok());
  Status st = s.add_counter("b", &b);
  EXPECT_EQ(st.code(), StatusCode::kPreconditionFailed);
  EXPECT_TRUE(has(st, "elastic::State 'state': key 'b' registered after the first commit()"))
      << st.to_string();
}

TEST_F(ElasticStateInitialized, SyncOnOneRankRollsBackToItsCommitOrCommitsCurrentValues) {
  State s;
  std::vector<double> w = {1.0, 2.0};
  std::string blob = "x";
  ASSERT_TRUE(s.add_tensor("w", view_of(w.data(), {2})).ok());
  ASSERT_TRUE(s.add_bytes("blob", &blob).ok());
  // No commit anywhere: the current values become the commit.
  ASSERT_TRUE(s.sync().ok());
  EXPECT_EQ(s.commits(), 1);
  EXPECT_EQ(w, (std::vector<double>{1.0, 2.0}));
  w[1] = 5.0;
  blob = "y";
  ASSERT_TRUE(s.sync().ok());
  EXPECT_EQ(s.commits(), 1);
  EXPECT_EQ(w, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(blob, "x");
}

TEST_F(ElasticStateInitialized, AnEmptyStateCommitsAndSyncs) {
  State s("empty");
  EXPECT_TRUE(s.commit().ok());
  EXPECT_TRUE(s.sync().ok());
  EXPECT_TRUE(s.restore().ok());
  EXPECT_EQ(s.commits(), 1);
}

// Calls from several threads are serialised: every commit counts, and a reader on another thread
// sees the count only grow (ThreadSanitizer's build checks the locking itself).
TEST_F(ElasticStateInitialized, ConcurrentCallsAreSerialised) {
  State s;
  std::vector<int64_t> w(4096, 0);
  ASSERT_TRUE(s.add_tensor("w", view_of(w.data(), {4096})).ok());
  ASSERT_TRUE(s.commit().ok());
  std::vector<int64_t> seen;
  std::thread committer([&] {
    for (int i = 0; i < 200; ++i) EXPECT_TRUE(s.commit().ok());
  });
  std::thread reader([&] {
    for (int i = 0; i < 200; ++i) seen.push_back(s.commits());
  });
  committer.join();
  reader.join();
  EXPECT_EQ(s.commits(), 201);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_GE(seen.front(), 1);
  EXPECT_LE(seen.back(), 201);
}

// The snapshot is the State's own memory: it outlives the session it was taken in.
TEST(ElasticState, ACommitSurvivesShutdownAndInit) {
  State s;
  int64_t step = 8;
  ASSERT_TRUE(s.add_counter("step", &step).ok());
  ASSERT_TRUE(init().ok());
  ASSERT_TRUE(s.commit().ok());
  ASSERT_TRUE(shutdown().ok());
  step = 9;
  ASSERT_TRUE(s.restore().ok());
  EXPECT_EQ(step, 8);
  ASSERT_TRUE(init().ok());
  step = 10;
  ASSERT_TRUE(s.sync().ok());
  EXPECT_EQ(step, 8);
  EXPECT_EQ(s.commits(), 1);
  ASSERT_TRUE(shutdown().ok());
}

}  // namespace
}  // namespace kolo::elastic
