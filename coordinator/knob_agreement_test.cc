// Knob agreement (knob_agreement.h): the verdict on the ranks' job-wide values, and the store
// protocol with every rank a thread over one MemoryStore.
#include "coordinator/knob_agreement.h"

#include <gtest/gtest.h>

#include <thread>

#include "rendezvous/memory_store.h"

namespace kolo::coord {
namespace {

KnobSet knobs_of(const std::map<std::string, std::string>& env) {
  Result<KnobSet> k = KnobSet::read(env);
  EXPECT_TRUE(k.ok()) << k.status().to_string();
  return std::move(k).value();
}

TEST(KnobAgreement, EqualValuesAgreeHoweverTheyAreWritten) {
  const std::string a = job_knobs_message(knobs_of({{"KOLO_FUSION_THRESHOLD", "4MiB"}}));
  const std::string b = job_knobs_message(knobs_of({{"KOLO_FUSION_THRESHOLD", "4194304"}}));
  const std::string unset = job_knobs_message(knobs_of({}));
  EXPECT_EQ(knob_disagreement({a, b, unset}), "");
}

TEST(KnobAgreement, OnlyJobWideKnobsAreCompared) {
  // A rank's log level, timeline file and timeouts are its own business.
  const std::string a = job_knobs_message(
      knobs_of({{"KOLO_LOG_LEVEL", "debug"}, {"KOLO_OP_TIMEOUT", "5s"}, {"KOLO_TIMELINE", "x"}}));
  const std::string b = job_knobs_message(knobs_of({}));
  EXPECT_EQ(knob_disagreement({a, b}), "");
  EXPECT_EQ(a.find("KOLO_LOG_LEVEL"), std::string::npos) << a;
  EXPECT_NE(a.find("KOLO_FUSION_THRESHOLD\t4194304\t4MiB (default)\n"), std::string::npos) << a;
}

TEST(KnobAgreement, TheVerdictNamesTheVariableAndEveryRanksValue) {
  const std::string dflt = job_knobs_message(knobs_of({}));
  const std::string off = job_knobs_message(knobs_of({{"KOLO_FUSION_THRESHOLD", "0"}}));
  EXPECT_EQ(knob_disagreement({dflt, off, dflt}),
            "KOLO_FUSION_THRESHOLD differs between ranks (ranks [0, 2] have 4MiB (default); "
            "rank 1 has 0): these settings must be the same on every rank");
}

TEST(KnobAgreement, EveryKnobThatDiffersIsNamedInRegistryOrder) {
  const std::string a =
      job_knobs_message(knobs_of({{"KOLO_RING_THRESHOLD", "1KiB"}, {"KOLO_CACHE_CAPACITY", "2"}}));
  const std::string b = job_knobs_message(knobs_of({}));
  const std::string verdict = knob_disagreement({a, b});
  const size_t cache = verdict.find(
      "KOLO_CACHE_CAPACITY differs between ranks (rank 0 has 2; "
      "rank 1 has 1024 (default))");
  const size_t ring = verdict.find("KOLO_RING_THRESHOLD differs between ranks (rank 0 has 1KiB;");
  ASSERT_NE(cache, std::string::npos) << verdict;
  ASSERT_NE(ring, std::string::npos) << verdict;
  EXPECT_LT(cache, ring) << verdict;
}

// A backend's job-wide rows (declared in its folder, no KnobId) are compared like the core's.
TEST(KnobAgreement, ABackendsJobWideRowsAreComparedToo) {
  const std::string a = job_knobs_message(knobs_of({{"KOLO_TCP_MAX_FRAME", "1MiB"}}));
  const std::string b = job_knobs_message(knobs_of({}));
  EXPECT_NE(a.find("KOLO_TCP_MAX_FRAME\t1048576\t1MiB\n"), std::string::npos) << a;
  EXPECT_NE(b.find("KOLO_SHM_CHUNK\t524288\t512KiB (default)\n"), std::string::npos) << b;
  EXPECT_EQ(knob_disagreement({a, b}),
            "KOLO_TCP_MAX_FRAME differs between ranks (rank 0 has 1MiB; rank 1 has 1GiB "
            "(default)): these settings must be the same on every rank");
}

TEST(KnobAgreement, AnEffectiveValueReplacesTheKnobs) {
  // KOLO_CPU_OPERATIONS unset means shm on one host and tcp across hosts: what counts is the
  // backend each rank would use.
  const std::string shm = job_knobs_message(knobs_of({}), {{KnobId::kCpuOperations, "shm"}});
  const std::string tcp = job_knobs_message(knobs_of({{"KOLO_CPU_OPERATIONS", "tcp"}}),
                                            {{KnobId::kCpuOperations, "tcp"}});
  EXPECT_NE(knob_disagreement({shm, tcp})
                .find("KOLO_CPU_OPERATIONS differs between ranks (rank 0 has shm (default); rank 1 "
                      "has tcp)"),
            std::string::npos)
      << knob_disagreement({shm, tcp});
}

TEST(KnobAgreement, AMessageFromAnotherVersionIsADisagreementNamingTheRank) {
  const std::string ok = job_knobs_message(knobs_of({}));
  EXPECT_EQ(knob_disagreement({ok, "garbage without tabs"}),
            "the job-wide settings of rank 1 cannot be read (another Kolo version?)");
  // A knob this version does not know is a difference, not an error.
  const std::string extra = ok + "KOLO_NEW_KNOB\t1\t1\n";
  EXPECT_NE(
      knob_disagreement({ok, extra})
          .find("KOLO_NEW_KNOB differs between ranks (rank 0 has (not a job-wide knob there); "
                "rank 1 has 1)"),
      std::string::npos)
      << knob_disagreement({ok, extra});
}

// Runs agree_on_job_knobs on `messages.size()` threads; returns each rank's Status.
std::vector<Status> agree(Store& store, const std::vector<std::optional<std::string>>& messages,
                          std::chrono::milliseconds timeout) {
  const int size = static_cast<int>(messages.size());
  std::vector<Status> out(messages.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    if (!messages[r]) continue;  // this rank never reaches init()
    threads.emplace_back(
        [&, r] { out[r] = agree_on_job_knobs(store, "test/s0", r, size, *messages[r], timeout); });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(KnobAgreement, EveryRankGetsTheSameVerdict) {
  MemoryStore store;
  const std::string dflt = job_knobs_message(knobs_of({}));
  const std::string off = job_knobs_message(knobs_of({{"KOLO_FUSION_THRESHOLD", "0"}}));
  std::vector<Status> got = agree(store, {dflt, dflt, off}, std::chrono::seconds(10));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].code(), StatusCode::kInvalidArgument) << r;
    EXPECT_EQ(got[r].message(), got[0].message()) << r;
  }
  EXPECT_NE(got[0].message().find("rank 2 has 0"), std::string::npos) << got[0].to_string();

  MemoryStore fresh;
  for (const Status& s : agree(fresh, {dflt, dflt, dflt}, std::chrono::seconds(10)))
    EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(KnobAgreement, ARankThatNeverComesTimesOutOnEveryRankNamingItsKey) {
  MemoryStore store;
  const std::string dflt = job_knobs_message(knobs_of({}));
  std::vector<Status> got =
      agree(store, {dflt, dflt, std::nullopt}, std::chrono::milliseconds(300));
  EXPECT_EQ(got[0].code(), StatusCode::kTimeout) << got[0].to_string();
  EXPECT_EQ(got[1].code(), StatusCode::kTimeout) << got[1].to_string();
  EXPECT_NE(got[0].message().find("test/s0/knobs/2"), std::string::npos) << got[0].to_string();
  EXPECT_EQ(got[1].message(), got[0].message());
}

}  // namespace
}  // namespace kolo::coord
