// One rank of an elastic::State job: `elastic_worker <scenario>`. Prints "rank R: <scenario>
// passed" on success; failures print what differed and exit 1. Values depend on the rank, so a
// rank that kept its own values where it should have taken another's is caught exactly.
//   roundtrip  commit() before init() fails; after it, commit / modify / restore gives every
//              registered byte back.
//   sync       ranks commit different numbers of times, then sync(): every rank holds the
//              commit of the lowest rank with the most commits (values, counters, byte strings
//              of different lengths, commits()); a rank whose State is new (no commit) takes it
//              whole; on a State nobody committed, rank 0's current values.
//   mismatch   rank 1 registers a different shape, rank 2 (of 3) an extra key: commit() fails
//              on every rank, printed as "rank R mismatch: <status>"; sync() on layouts of
//              different kinds likewise ("rank R sync mismatch: ..."); nothing was committed,
//              and the job goes on (a later sync succeeds).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kolo/elastic.h"
#include "kolo/kolo.h"
#include "tests/support/worker_checks.h"

namespace {

using kolo::elastic::State;
using kolo::testing::failures;
using kolo::testing::ok;

// A rank's training state, registered in a different order on odd ranks (the layout is sorted
// by key, so the order must not matter).
struct Model {
  std::vector<float> w = std::vector<float>(12);
  std::vector<int64_t> ids = std::vector<int64_t>(3);
  int64_t step = 0;
  std::string rng;

  void fill(int rank, int version) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = 1000.0f * rank + 10.0f * version + 0.25f * i;
    ids = {rank, version, -rank * version};
    step = 100 * rank + version;
    rng = "rank " + std::to_string(rank) + " version " + std::to_string(version) +
          std::string(static_cast<size_t>(rank + version), '+');
  }
  bool is(int rank, int version) const {
    Model m;
    m.fill(rank, version);
    return w == m.w && ids == m.ids && step == m.step && rng == m.rng;
  }
  void add_to(State& s, int me) {
    auto tensors = [&] {
      ok(s.add_tensor("w", kolo::view_of(w.data(), {3, 4})), "add w");
      ok(s.add_tensor("ids", kolo::view_of(ids.data(), {3})), "add ids");
    };
    if (me % 2) tensors();
    ok(s.add_counter("step", &step), "add step");
    ok(s.add_bytes("rng", &rng), "add rng");
    if (me % 2 == 0) tensors();
  }
};

void roundtrip(int me) {
  Model m;
  State s("roundtrip");
  m.add_to(s, me);
  m.fill(me, 1);
  ok(s.commit(), "commit");
  m.fill(me, 2);
  ok(s.commit(), "commit 2");
  m.fill(me + 7, 3);
  ok(s.restore(), "restore");
  CHECK(m.is(me, 2));
  CHECK(s.commits() == 2);
}

// Ranks 1.. commit `me` times after a first sync; the last rank then loses its State (a
// replacement rank); rank P-2 has the most commits.
void sync_different_counts(int me, int P) {
  Model m;
  auto s = std::make_unique<State>("sync");
  m.add_to(*s, me);
  m.fill(me, 0);
  ok(s->sync(), "first sync");  // collective; rank 0's values everywhere, one commit each
  CHECK(m.is(0, 0) && s->commits() == 1);
  const int newest = P - 2;
  for (int k = 1; k <= me && me < P - 1; ++k) {
    m.fill(me, k);
    ok(s->commit(), "commit " + std::to_string(k));
  }
  m.fill(me, 50);  // steps after the last commit, lost by the sync
  if (me == P - 1) {
    s = std::make_unique<State>("sync");
    m.add_to(*s, me);
    CHECK(s->commits() == 0);
  }
  ok(s->sync(), "sync");
  CHECK(m.is(newest, newest));
  CHECK(s->commits() == 1 + newest);
  m.fill(me, 60);
  ok(s->restore(), "restore after sync");  // the synced commit is this rank's own now
  CHECK(m.is(newest, newest));
}

// Ranks 1.. commit twice, rank 0 once: the lowest of the ranks with the most is rank 1.
void sync_tie(int me) {
  Model m;
  State s("tie");
  m.add_to(s, me);
  m.fill(me, 1);
  ok(s.commit(), "tie commit");
  m.fill(me, 2);
  if (me > 0) ok(s.commit(), "tie commit 2");
  ok(s.sync(), "tie sync");
  CHECK(m.is(1, 2) && s.commits() == 2);
  // Nobody committed this one: rank 0's current values.
  Model fresh;
  State none("none");
  fresh.add_to(none, me);
  fresh.fill(me, 9);
  ok(none.sync(), "sync without commits");
  CHECK(fresh.is(0, 9) && none.commits() == 1);
}

void mismatch(int me) {
  std::vector<float> w(16, me + 1.0f);
  int64_t step = me, extra = 0;
  State s("mm");
  ok(s.add_tensor("w", kolo::view_of(w.data(), {4, me == 1 ? 4 : 3})), "add w");
  ok(s.add_counter("step", &step), "add step");
  if (me == 2) ok(s.add_counter("extra", &extra), "add extra");
  kolo::Status st = s.commit();
  CHECK(st.code() == kolo::StatusCode::kMismatch);
  std::printf("rank %d mismatch: %s\n", me, st.to_string().c_str());
  CHECK(s.commits() == 0 && s.restore().code() == kolo::StatusCode::kPreconditionFailed);
  CHECK(w == std::vector<float>(16, me + 1.0f) && step == me);
  // Different kinds under one key, found by sync.
  std::string pos = "p";
  State k("kinds");
  if (me == 1)
    ok(k.add_bytes("pos", &pos), "add pos bytes");
  else
    ok(k.add_counter("pos", &step), "add pos counter");
  st = k.sync();
  CHECK(st.code() == kolo::StatusCode::kMismatch);
  std::printf("rank %d sync mismatch: %s\n", me, st.to_string().c_str());
  // The ranks are still in step.
  State good("good");
  ok(good.add_counter("step", &step), "add good step");
  ok(good.sync(), "sync after the mismatches");
  CHECK(step == 0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "roundtrip";
  {
    State early("early");
    int64_t c = 0;
    ok(early.add_counter("c", &c), "add before init");
    CHECK(early.commit().code() == kolo::StatusCode::kPreconditionFailed);
    CHECK(early.sync().code() == kolo::StatusCode::kPreconditionFailed);
  }
  if (!ok(kolo::init(), "init")) return 1;
  const int me = kolo::rank(), P = kolo::size();
  if (scenario == "roundtrip") {
    roundtrip(me);
  } else if (scenario == "sync") {
    sync_different_counts(me, P);
    sync_tie(me);
  } else if (scenario == "mismatch") {
    mismatch(me);
  } else {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    ++failures;
  }
  ok(kolo::shutdown(), "shutdown");
  if (failures > 0) return 1;
  std::printf("rank %d: %s passed\n", me, scenario.c_str());
  return 0;
}
