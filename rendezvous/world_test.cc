#include "rendezvous/world.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "rendezvous/memory_store.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;

// The world of an environment holding exactly `vars`: the launcher's knobs as init() reads them
// (KnobSet::read, whose errors name a malformed value), then world_from_knobs.
Result<World> world_of(const std::map<std::string, std::string>& vars) {
  KOLO_ASSIGN_OR_RETURN(KnobSet knobs, KnobSet::read(vars));
  return world_from_knobs(knobs);
}

KnobSet knobs_of(const std::map<std::string, std::string>& vars) {
  Result<KnobSet> knobs = KnobSet::read(vars);
  EXPECT_TRUE(knobs.ok()) << knobs.status().to_string();
  return knobs.ok() ? *knobs : KnobSet::defaults();
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  auto w = world_of(vars);
  EXPECT_FALSE(w.ok());
  if (w.ok()) return "";
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  return w.status().message();
}

TEST(WorldFromKnobs, WithoutKoloRankIsASingleRankWorldWithAStore) {
  EXPECT_FALSE(launched_by_kolorun(KnobSet::defaults()));
  auto w = world_from_knobs(KnobSet::defaults());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->rank, 0);
  EXPECT_EQ(w->size, 1);
  EXPECT_EQ(w->local_size, 1);
  EXPECT_EQ(w->cross_size, 1);
  ASSERT_NE(w->store, nullptr);
  EXPECT_TRUE(w->store->set("k", "v").ok());
  EXPECT_EQ(w->secret.size(), 32u);
}

TEST(WorldFromKnobs, ReadsEveryVariableAndConnectsTheStore) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, "00112233445566778899aabbccddeeff").value();
  const KnobSet knobs = knobs_of({{"KOLO_RANK", "3"},
                                  {"KOLO_SIZE", "4"},
                                  {"KOLO_LOCAL_RANK", "1"},
                                  {"KOLO_LOCAL_SIZE", "2"},
                                  {"KOLO_CROSS_RANK", "1"},
                                  {"KOLO_CROSS_SIZE", "2"},
                                  {"KOLO_STORE_ADDR", server->address()},
                                  {"KOLO_SECRET", "00112233445566778899aabbccddeeff"}});
  EXPECT_TRUE(launched_by_kolorun(knobs));
  auto w = world_from_knobs(knobs);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->size, 4);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_size, 2);
  EXPECT_EQ(w->cross_rank, 1);
  EXPECT_EQ(w->cross_size, 2);
  EXPECT_EQ(w->secret, "00112233445566778899aabbccddeeff");
  EXPECT_EQ(w->server, nullptr);
  ASSERT_TRUE(w->store->set("from/world", "x").ok());
  auto direct =
      TcpStore::connect({"127.0.0.1", server->port()}, "00112233445566778899aabbccddeeff", 1s, 1s)
          .value();
  EXPECT_EQ(direct->get("from/world", 1s).value(), "x");
}

// Issue 27: with no store server at KOLO_STORE_ADDR, the connect gives up after
// KOLO_RENDEZVOUS_TIMEOUT (kolorun's --timeout), not a constant, and says which setting it was.
TEST(WorldFromKnobs, TheStoreConnectWaitsAsLongAsTheRendezvousTimeout) {
  const int port = TcpStoreServer::start("127.0.0.1", 0, "s").value()->port();  // now closed
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const auto start = std::chrono::steady_clock::now();
  auto w = world_of({{"KOLO_RANK", "1"},
                     {"KOLO_SIZE", "2"},
                     {"KOLO_STORE_ADDR", addr},
                     {"KOLO_SECRET", "s"},
                     {"KOLO_RENDEZVOUS_TIMEOUT", "400ms"}});
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kIoError);
  EXPECT_GE(waited, 390ms);  // the last attempt starts 10 ms before the deadline
  EXPECT_LT(waited, 400ms + 3s);
  const std::string& msg = w.status().message();
  EXPECT_EQ(msg.rfind("store: cannot connect to " + addr + " within 400ms: ", 0), 0u) << msg;
  const std::string hint =
      "; KOLO_RENDEZVOUS_TIMEOUT=400ms bounds each wait of the rendezvous (kolorun --timeout DUR "
      "sets it)";
  ASSERT_GE(msg.size(), hint.size());
  EXPECT_EQ(msg.substr(msg.size() - hint.size()), hint) << msg;
}

TEST(WorldFromKnobs, RendezvousTimeoutIsTheKnobInWholeMillisecondsRoundedUp) {
  EXPECT_EQ(rendezvous_timeout(KnobSet::defaults()), 5min);  // the registry row's default
  EXPECT_EQ(rendezvous_timeout(knobs_of({{"KOLO_RENDEZVOUS_TIMEOUT", "1500us"}})), 2ms);
  EXPECT_EQ(rendezvous_timeout(knobs_of({{"KOLO_RENDEZVOUS_TIMEOUT", "20s"}})), 20000ms);
  EXPECT_EQ(KnobSet::read({{"KOLO_RENDEZVOUS_TIMEOUT", "0"}}).status().message(),
            "KOLO_RENDEZVOUS_TIMEOUT=0 is invalid: expected a duration with an optional unit (ns, "
            "us, ms, s, min, h; none: seconds) in [1.0 ms, 604800.0 s], e.g. 5ms");
  // Only the rendezvous's own failures get the hint.
  const Status bad = Status::InvalidArgument("x");
  EXPECT_EQ(with_rendezvous_timeout_hint(bad, KnobSet::defaults()).message(), "x");
  EXPECT_EQ(with_rendezvous_timeout_hint(Status::Timeout("t"), KnobSet::defaults()).message(),
            "t; KOLO_RENDEZVOUS_TIMEOUT=5min bounds each wait of the rendezvous (kolorun "
            "--timeout DUR sets it)");
}

TEST(WorldFromKnobs, LocalAndCrossDefaultToOneNode) {
  auto w = world_of({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}});
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->local_rank, 0);
  EXPECT_EQ(w->local_size, 1);
  EXPECT_EQ(w->cross_rank, 0);
  EXPECT_EQ(w->cross_size, 1);
}

TEST(WorldFromKnobs, MalformedVariablesNameVariableValueAndForm) {
  const std::map<std::string, std::string> base = {
      {"KOLO_SIZE", "4"}, {"KOLO_STORE_ADDR", "127.0.0.1:1"}, {"KOLO_SECRET", "s"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    auto m = base;
    for (auto& [k, v] : extra) m[k] = v;
    return m;
  };
  EXPECT_EQ(error_of(with({{"KOLO_RANK", "abc"}})),
            "KOLO_RANK=abc is invalid: expected an integer >= 0");
  EXPECT_EQ(error_of(with({{"KOLO_RANK", "4"}})),
            "KOLO_RANK=4 is invalid: expected an integer in [0, KOLO_SIZE=4)");
  EXPECT_EQ(error_of(with({{"KOLO_RANK", "-1"}})),
            "KOLO_RANK=-1 is invalid: expected an integer >= 0");
  EXPECT_EQ(error_of(with({{"KOLO_RANK", "1"}, {"KOLO_SIZE", "0"}})),
            "KOLO_SIZE=0 is invalid: expected an integer > 0");
  EXPECT_EQ(error_of(with({{"KOLO_RANK", "1"}, {"KOLO_SIZE", "2x"}})),
            "KOLO_SIZE=2x is invalid: expected an integer > 0");
  EXPECT_EQ(error_of({{"KOLO_RANK", "1"}}),
            "KOLO_SIZE is not set: expected an integer > 0 (kolorun sets it)");
  EXPECT_EQ(
      error_of(with({{"KOLO_RANK", "1"}, {"KOLO_LOCAL_SIZE", "2"}, {"KOLO_LOCAL_RANK", "2"}})),
      "KOLO_LOCAL_RANK=2 is invalid: expected an integer in [0, KOLO_LOCAL_SIZE=2)");
  EXPECT_EQ(error_of(with({{"KOLO_RANK", "1"}, {"KOLO_LOCAL_SIZE", "5"}})),
            "KOLO_LOCAL_SIZE=5 is invalid: expected an integer in [1, KOLO_SIZE=4]");
  EXPECT_EQ(
      error_of(with({{"KOLO_RANK", "1"}, {"KOLO_CROSS_SIZE", "2"}, {"KOLO_CROSS_RANK", "x"}})),
      "KOLO_CROSS_RANK=x is invalid: expected an integer >= 0");
  EXPECT_EQ(
      error_of(with({{"KOLO_RANK", "1"}, {"KOLO_CROSS_SIZE", "2"}, {"KOLO_CROSS_RANK", "2"}})),
      "KOLO_CROSS_RANK=2 is invalid: expected an integer in [0, KOLO_CROSS_SIZE=2)");
  EXPECT_EQ(error_of({{"KOLO_SIZE", "4"}}),
            "KOLO_SIZE=4 is set but KOLO_RANK is not: set KOLO_RANK (an integer in [0, "
            "KOLO_SIZE)) too, or unset KOLO_SIZE");
}

TEST(WorldFromKnobs, MultiRankNeedsStoreAddressAndSecret) {
  EXPECT_EQ(error_of({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "2"}, {"KOLO_SECRET", "s"}}),
            "KOLO_STORE_ADDR is not set: expected HOST:PORT of the rendezvous store (kolorun "
            "sets it) when KOLO_SIZE=2 > 1");
  EXPECT_EQ(error_of({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "2"}, {"KOLO_STORE_ADDR", "x:1"}}),
            "KOLO_SECRET is not set: expected the job's shared secret (a non-empty string, e.g. "
            "32 hex digits; kolorun sets it) when KOLO_SIZE=2 > 1");
  std::string bad_addr = error_of({{"KOLO_RANK", "0"},
                                   {"KOLO_SIZE", "2"},
                                   {"KOLO_SECRET", "s"},
                                   {"KOLO_STORE_ADDR", "nohost"}});
  EXPECT_EQ(bad_addr.rfind("KOLO_STORE_ADDR=\"nohost\" is invalid", 0), 0u) << bad_addr;
  EXPECT_NE(bad_addr.find("expected HOST:PORT"), std::string::npos) << bad_addr;
}

TEST(RendezvousBarrier, AllRanksPass) {
  MemoryStore store;
  std::vector<std::thread> ranks;
  std::vector<Status> results(4);
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] { results[r] = rendezvous_barrier(store, "b1", r, 4, 10s); });
  for (auto& t : ranks) t.join();
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(RendezvousBarrier, TimeoutNamesTheRanksThatNeverArrived) {
  MemoryStore store;
  ASSERT_TRUE(store.set("job/arrived/1", "1").ok());
  Status s = rendezvous_barrier(store, "job", 0, 4, 30ms);
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_EQ(s.message(), "rendezvous timed out after 30ms: ranks 2, 3 of 4 never arrived");
  Status one = rendezvous_barrier(store, "nodes", 0, 2, 1000ms, "node ranks");
  EXPECT_EQ(one.message(), "rendezvous timed out after 1s: node rank 1 of 2 never arrived");
}

TEST(RendezvousBarrier, RejectsRankOutsideTheGroup) {
  MemoryStore store;
  EXPECT_EQ(rendezvous_barrier(store, "p", 4, 4, 1s).message(),
            "rendezvous_barrier: rank must be in [0, 4), got 4");
  EXPECT_EQ(rendezvous_barrier(store, "p", 0, 0, 1s).message(),
            "rendezvous_barrier: size must be >= 1, got 0");
}

}  // namespace
}  // namespace kolo
