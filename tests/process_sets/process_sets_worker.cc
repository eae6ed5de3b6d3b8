// One rank of a process-set job: `process_sets_worker <scenario>`. Prints
// "rank R: <scenario> passed" on success; failures print what differed and exit 1.
//   sets     every operation on sets of every shape (singleton, all, even ranks, odd ranks:
//            no rank 0), each set's work on its own thread at once, the same names in every
//            set; a non-member's submission; bad rank lists; removal with pending work.
//   static   the sets of KOLO_PROCESS_SETS=0,1;2,3 (4 ranks).
//   helpers  the operations built on the negotiated ones (grouped gathers, objects) and the
//            blocking allgather, broadcast and alltoall on the set of ranks 1..P-1 (no rank 0);
//            rank 0's submissions to it fail naming the set (printed).
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"
#include "tests/support/worker_checks.h"

namespace {

using kolo::testing::failures;
using kolo::testing::ok;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every operation on `set` (this rank is a member), results checked exactly against the
// members' global ranks. The names are the same for every set.
void every_op(const kolo::ProcessSet& set) {
  const std::vector<int> g = set.ranks();
  const int k = set.size(), s = set.rank(), me = kolo::rank();
  const std::string where = set.to_string() + ": ";
  CHECK(s >= 0 && g[s] == me && set.includes(me));
  int sum = 0;
  for (int x : g) sum += x + 1;
  std::vector<float> a(6, me + 1.0f), avg(6, me + 1.0f), mx(6, me + 1.0f), in(6, me + 1.0f),
      out(6, 0.0f);
  auto h1 = kolo::allreduce_async("sum", kolo::view_of(a.data(), {2, 3}), {.process_set = set});
  auto h2 =
      kolo::allreduce_async("avg", kolo::view_of(avg.data(), {6}),
                            {.reduction = {.op = kolo::ReduceOp::kAverage}, .process_set = set});
  auto h3 = kolo::allreduce_async("max", kolo::view_of(mx.data(), {6}),
                                  {.reduction = {.op = kolo::ReduceOp::kMax}, .process_set = set});
  auto h4 = kolo::allreduce_async("oop", kolo::view_of(in.data(), {6}),
                                  kolo::view_of(out.data(), {6}), {.process_set = set});
  ok(h1.wait(), where + "sum");
  ok(h2.wait(), where + "avg");
  ok(h3.wait(), where + "max");
  ok(h4.wait(), where + "out-of-place");
  CHECK(a[5] == sum);
  CHECK(avg[0] == static_cast<float>(sum) / k);
  CHECK(mx[2] == g.back() + 1.0f);
  CHECK(out[1] == sum && in[1] == me + 1.0f);
  std::vector<double> g1(2, me), g2(3, 2.0 * me);
  ok(kolo::grouped_allreduce("group",
                             {kolo::view_of(g1.data(), {2}), kolo::view_of(g2.data(), {3})},
                             {.process_set = set}),
     where + "grouped");
  CHECK(g2[2] == 2.0 * (sum - k));
  std::vector<int64_t> rows(s + 1, me);
  auto gathered =
      kolo::allgather_async("gather", kolo::view_of(rows.data(), {s + 1}), {.process_set = set});
  if (ok(gathered.wait(), where + "allgather")) {
    kolo::HostTensor t = gathered.take_output();
    CHECK(t.shape[0] == k * (k + 1) / 2);
    int64_t at = 0;
    for (int q = 0; q < k; ++q)
      for (int i = 0; i <= q; ++i) CHECK(t.data_as<int64_t>()[at++] == g[q]);
  }
  std::vector<int32_t> b(4, me);
  ok(kolo::broadcast_async("bcast", kolo::view_of(b.data(), {4}),
                           {.root = k - 1, .process_set = set})
         .wait(),
     where + "broadcast");
  CHECK(b[3] == g.back());
  std::vector<float> x(k, static_cast<float>(me));
  auto exchanged = kolo::alltoall_async("a2a", kolo::view_of(x.data(), {k}), {.process_set = set});
  if (ok(exchanged.wait(), where + "alltoall")) {
    kolo::HostTensor t = exchanged.take_output();
    for (int q = 0; q < k; ++q) CHECK(t.data_as<float>()[q] == g[q]);
  }
  std::vector<float> rs(2 * k, 1.0f);
  auto scattered =
      kolo::reducescatter_async("rs", kolo::view_of(rs.data(), {2 * k}), {.process_set = set});
  if (ok(scattered.wait(), where + "reducescatter")) {
    kolo::HostTensor t = scattered.take_output();
    CHECK(t.shape[0] == 2);
    CHECK(t.data_as<float>()[1] == k);
  }
  ok(kolo::barrier("barrier", set), where + "barrier");
}

std::vector<int> ranks_where(int P, bool (*pred)(int, int)) {
  std::vector<int> out;
  for (int r = 0; r < P; ++r)
    if (pred(r, P)) out.push_back(r);
  return out;
}

void sets() {
  const int me = kolo::rank(), P = kolo::size();
  // Every shape; "all" is listed in reverse (any order names the same set).
  std::vector<std::vector<int>> shapes = {
      {P - 1},
      ranks_where(P, [](int, int) { return true; }),
      ranks_where(P, [](int r, int) { return r % 2 == 0; }),
  };
  std::reverse(shapes[1].begin(), shapes[1].end());
  if (P > 1) shapes.push_back(ranks_where(P, [](int r, int) { return r % 2 == 1; }));
  std::vector<kolo::ProcessSet> added;
  for (const auto& ranks : shapes) {
    auto set = kolo::add_process_set(ranks);
    if (!ok(set.status(), "add_process_set")) return;
    added.push_back(*set);
  }
  for (size_t i = 0; i < added.size(); ++i) CHECK(added[i].id() == static_cast<int>(i) + 1);
  CHECK(kolo::process_sets().size() == added.size() + 1);
  CHECK(added[1].ranks().size() == static_cast<size_t>(P) && added[1].ranks()[0] == 0);

  // Each set this rank belongs to runs on its own thread, all at once, the global set too.
  std::vector<std::thread> threads;
  for (const auto& set : added)
    if (set.includes(me)) threads.emplace_back([set] { every_op(set); });
  threads.emplace_back([] { every_op(kolo::global_process_set()); });
  for (auto& t : threads) t.join();

  // A non-member's submission fails at once, naming the set and the rank.
  for (const auto& set : added) {
    if (set.includes(me)) continue;
    std::vector<float> v(2, 1.0f);
    kolo::Status st =
        kolo::allreduce("outside", kolo::view_of(v.data(), {2}), {.process_set = set});
    CHECK(st.code() == kolo::StatusCode::kInvalidArgument);
    CHECK(contains(st.message(), "rank " + std::to_string(me) + " is not in process set " +
                                     std::to_string(set.id())));
    std::printf("rank %d outside: %s\n", me, st.to_string().c_str());
  }

  // Bad lists: the same error on every rank, and the job goes on.
  auto dup = kolo::add_process_set({0, 0});
  CHECK(dup.status().code() == kolo::StatusCode::kInvalidArgument);
  CHECK(contains(dup.status().message(), "rank 0 appears more than once in [0, 0]"));
  auto range = kolo::add_process_set({0, P});
  CHECK(range.status().code() == kolo::StatusCode::kInvalidArgument);
  CHECK(contains(range.status().message(), "rank " + std::to_string(P) + " in [0, " +
                                               std::to_string(P) + "] is out of range"));
  if (P > 1) {
    auto differ = kolo::add_process_set(me == 0 ? std::vector<int>{0} : std::vector<int>{0, 1});
    CHECK(differ.status().code() == kolo::StatusCode::kInvalidArgument);
    CHECK(contains(differ.status().message(),
                   "the ranks differ between ranks: rank 0 passed [0]; rank"));
    std::printf("rank %d differ: %s\n", me, differ.status().to_string().c_str());
  }

  // Removing a set with pending work: rank 0's lone allreduce (the others never submit it)
  // fails with Aborted naming the set; later submissions fail naming the removed set.
  const kolo::ProcessSet& all = added[1];
  std::vector<float> v(2, 1.0f);
  kolo::Handle pending;
  if (me == 0)
    pending = kolo::allreduce_async("pending", kolo::view_of(v.data(), {2}), {.process_set = all});
  // A set with a stuck operation stalls no other: the global set and the even ranks' set run
  // everything while "pending" waits in set 2.
  if (added[2].includes(me)) every_op(added[2]);
  ok(kolo::barrier("before remove"), "barrier");
  ok(kolo::remove_process_set(all), "remove_process_set");
  if (me == 0) {
    kolo::Status st = pending.wait();
    CHECK(st.code() == kolo::StatusCode::kAborted);
    CHECK(contains(st.message(), "process set 2 was removed"));
    std::printf("rank 0 pending: %s\n", st.to_string().c_str());
  }
  kolo::Status after = kolo::allreduce("later", kolo::view_of(v.data(), {2}), {.process_set = all});
  CHECK(after.code() == kolo::StatusCode::kInvalidArgument);
  CHECK(contains(after.message(), "process set 2 does not exist"));
  CHECK(kolo::remove_process_set(all).code() == kolo::StatusCode::kInvalidArgument);
  CHECK(kolo::remove_process_set(kolo::global_process_set()).code() ==
        kolo::StatusCode::kInvalidArgument);
  CHECK(kolo::process_sets().size() == added.size());
  // The other sets still work after the removal and the failed adds.
  if (added[2].includes(me)) every_op(added[2]);
  // A set added after a removal gets the next id.
  auto next = kolo::add_process_set({0});
  if (ok(next.status(), "add after remove"))
    CHECK(next->id() == static_cast<int>(added.size()) + 1);
}

// Exact results of the helpers on `set` (this rank is a member), against the members' ranks.
void helpers_on(const kolo::ProcessSet& set) {
  const std::vector<int> g = set.ranks();
  const int k = set.size(), s = set.rank(), me = kolo::rank();
  std::vector<int32_t> rows(s + 1, me), pair{10 * me, 10 * me + 1};
  auto gathered = kolo::grouped_allgather(
      "g", {kolo::view_of(rows.data(), {s + 1}), kolo::view_of(pair.data(), {1, 2})}, set);
  if (ok(gathered.status(), "grouped_allgather") && gathered->size() == 2) {
    const kolo::HostTensor& a = (*gathered)[0];
    const kolo::HostTensor& b = (*gathered)[1];
    CHECK(a.shape == (std::vector<int64_t>{k * (k + 1) / 2}));
    CHECK(b.shape == (std::vector<int64_t>{k, 2}));
    int64_t at = 0;
    for (int q = 0; q < k; ++q) {
      for (int i = 0; i <= q; ++i) CHECK(a.data_as<int32_t>()[at++] == g[q]);
      CHECK(b.data_as<int32_t>()[2 * q + 1] == 10 * g[q] + 1);
    }
  }
  // Member x: 2 rows per member; member y: k + 1 rows (set rank 0 gets two).
  std::vector<float> x(2 * k, me + 1.0f), y(k + 1, 2.0f * me);
  for (int i = 0; i < k + 1; ++i) y[i] += i;
  auto shares = kolo::grouped_reducescatter(
      "grs", {kolo::view_of(x.data(), {2 * k}), kolo::view_of(y.data(), {k + 1})}, {}, set);
  float sum = 0;
  for (int r : g) sum += r;
  if (ok(shares.status(), "grouped_reducescatter") && shares->size() == 2) {
    const kolo::HostTensor& xs = (*shares)[0];
    const kolo::HostTensor& ys = (*shares)[1];
    CHECK(xs.shape == (std::vector<int64_t>{2}));
    CHECK(xs.data_as<float>()[1] == sum + k);
    const int first = s == 0 ? 0 : s + 1;  // rows of y before this member's share
    CHECK(ys.shape == (std::vector<int64_t>{s == 0 ? 2 : 1}));
    CHECK(ys.data_as<float>()[0] == 2.0f * sum + k * first);
  }
  auto from_last = kolo::broadcast_object(
      "obj", me == g.back() ? "from rank " + std::to_string(me) : "", k - 1, set);
  if (ok(from_last.status(), "broadcast_object"))
    CHECK(*from_last == "from rank " + std::to_string(g.back()));
  auto all = kolo::allgather_object("objs", std::string(static_cast<size_t>(me), 'a' + me), set);
  if (ok(all.status(), "allgather_object") && static_cast<int>(all->size()) == k)
    for (int q = 0; q < k; ++q)
      CHECK((*all)[q] == std::string(static_cast<size_t>(g[q]), 'a' + g[q]));
  // The blocking forms of the operations whose options are not a struct there.
  std::vector<int64_t> one{me};
  auto ag = kolo::allgather("ag", kolo::view_of(one.data(), {1}), set);
  if (ok(ag.status(), "allgather")) CHECK(ag->data_as<int64_t>()[k - 1] == g.back());
  ok(kolo::broadcast("bc", kolo::view_of(one.data(), {1}), 0, set), "broadcast");
  CHECK(one[0] == g[0]);
  std::vector<double> spread(k, me);
  auto a2a = kolo::alltoall("a2a", kolo::view_of(spread.data(), {k}), {}, set);
  if (ok(a2a.status(), "alltoall")) CHECK(a2a->output.data_as<double>()[k - 1] == g.back());
}

void helpers() {
  const int me = kolo::rank(), P = kolo::size();
  std::vector<int> rest;
  for (int r = 1; r < P; ++r) rest.push_back(r);
  auto set = kolo::add_process_set(rest);
  if (!ok(set.status(), "add_process_set")) return;
  if (set->includes(me)) {
    helpers_on(*set);
    return;
  }
  // Rank 0, outside the set: each fails at once, naming the set and the rank.
  std::vector<float> v(2, 1.0f);
  auto gathered = kolo::grouped_allgather("g", {kolo::view_of(v.data(), {2})}, *set);
  CHECK(gathered.status().code() == kolo::StatusCode::kInvalidArgument);
  std::printf("rank %d grouped: %s\n", me, gathered.status().to_string().c_str());
  auto object = kolo::broadcast_object("obj", "x", 0, *set);
  CHECK(object.status().code() == kolo::StatusCode::kInvalidArgument);
  std::printf("rank %d object: %s\n", me, object.status().to_string().c_str());
  auto objects = kolo::allgather_object("objs", "x", *set);
  CHECK(objects.status().code() == kolo::StatusCode::kInvalidArgument);
  // A root outside the set's ranks is named as such.
  auto far = kolo::broadcast_object("far", "x", P - 1, *set);
  CHECK(far.status().code() == kolo::StatusCode::kInvalidArgument);
  std::printf("rank %d far root: %s\n", me, far.status().to_string().c_str());
}

void static_sets() {
  const auto sets = kolo::process_sets();
  CHECK(sets.size() == 3);
  if (sets.size() != 3) return;
  CHECK(sets[1].ranks() == (std::vector<int>{0, 1}));
  CHECK(sets[2].ranks() == (std::vector<int>{2, 3}));
  for (const auto& set : sets)
    if (set.includes(kolo::rank())) every_op(set);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "sets";
  CHECK(kolo::add_process_set({0}).status().code() == kolo::StatusCode::kPreconditionFailed);
  if (!ok(kolo::init(), "init")) return 1;
  const int me = kolo::rank();
  if (scenario == "sets")
    sets();
  else if (scenario == "static")
    static_sets();
  else if (scenario == "helpers")
    helpers();
  ok(kolo::shutdown(), "shutdown");
  if (failures > 0) return 1;
  std::printf("rank %d: %s passed\n", me, scenario.c_str());
  return 0;
}
