// One rank of a coordinator multi-process test: `coordinator_worker <scenario> [dir]`.
// Prints "rank R: <scenario> passed" on success; failures print what differed and exit 1.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"

namespace {

int failures = 0;
#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "rank %d: check failed: %s\n", kolo::rank(), #cond); \
      ++failures;                                                               \
    }                                                                           \
  } while (0)

bool ok(const kolo::Status& st, const char* what) {
  if (st.ok()) return true;
  std::fprintf(stderr, "rank %d: %s: %s\n", kolo::rank(), what, st.to_string().c_str());
  ++failures;
  return false;
}

void every_op() {
  const int r = kolo::rank(), P = kolo::size();
  std::vector<float> sum(8, r + 1.0f), avg(8, r + 1.0f), mx(8, r + 1.0f);
  auto h1 = kolo::allreduce_async("sum", kolo::view_of(sum.data(), {2, 4}));
  auto h2 = kolo::allreduce_async("avg", kolo::view_of(avg.data(), {8}),
                                  {.reduction = {.op = kolo::ReduceOp::kAverage}});
  auto h3 = kolo::allreduce_async("max", kolo::view_of(mx.data(), {8}),
                                  {.reduction = {.op = kolo::ReduceOp::kMax}});
  ok(h3.wait(), "max");
  ok(h1.wait(), "sum");
  ok(h2.wait(), "avg");
  CHECK(sum[7] == P * (P + 1) / 2.0f);
  CHECK(avg[0] == (P + 1) / 2.0f);
  CHECK(mx[3] == P);
  std::vector<double> g1(2, r), g2(3, 2.0 * r);
  ok(kolo::grouped_allreduce("group",
                             {kolo::view_of(g1.data(), {2}), kolo::view_of(g2.data(), {3})}),
     "grouped");
  CHECK(g2[2] == P * (P - 1.0));
  std::vector<int64_t> rows(r + 1, r);
  auto gathered = kolo::allgather("gather", kolo::view_of(rows.data(), {r + 1}));
  if (ok(gathered.status(), "allgather")) {
    CHECK(gathered->shape[0] == P * (P + 1) / 2);
    CHECK(gathered->data_as<int64_t>()[gathered->shape[0] - 1] == P - 1);
  }
  std::vector<int32_t> b(4, r);
  ok(kolo::broadcast("bcast", kolo::view_of(b.data(), {4}), P - 1), "broadcast");
  CHECK(b[3] == P - 1);
  std::vector<float> a2a(P, static_cast<float>(r));
  auto exchanged = kolo::alltoall("a2a", kolo::view_of(a2a.data(), {P}));
  if (ok(exchanged.status(), "alltoall")) {
    for (int q = 0; q < P; ++q) CHECK(exchanged->output.data_as<float>()[q] == q);
    CHECK(exchanged->received_splits == std::vector<int64_t>(P, 1));
  }
  std::vector<float> rs(2 * P, 1.0f);
  auto scattered = kolo::reducescatter("rs", kolo::view_of(rs.data(), {2 * P}));
  if (ok(scattered.status(), "reducescatter")) {
    CHECK(scattered->shape[0] == 2);
    CHECK(scattered->data_as<float>()[1] == P);
  }
  ok(kolo::barrier(), "barrier");
}

// Issue 17: grouped gathers, objects, receive counts, join's last rank, the blocking calls'
// results and the build queries.
void api() {
  const int r = kolo::rank(), P = kolo::size();
  // Grouped allgather: member 0 has r+1 rows of [2] int32, member 1 one row of [3] double.
  std::vector<int32_t> a(2 * (r + 1), r);
  std::vector<double> b(3, 10.0 * r);
  auto g = kolo::grouped_allgather(
      "g.ag", {kolo::view_of(a.data(), {r + 1, 2}), kolo::view_of(b.data(), {1, 3})});
  if (ok(g.status(), "grouped_allgather") && g->size() == 2) {
    const kolo::HostTensor& ga = (*g)[0];
    const kolo::HostTensor& gb = (*g)[1];
    CHECK(ga.shape == (std::vector<int64_t>{P * (P + 1) / 2, 2}));
    CHECK(ga.dtype == kolo::DataType::kInt32);
    int64_t row = 0;
    for (int q = 0; q < P; ++q)
      for (int i = 0; i <= q; ++i, ++row) CHECK(ga.data_as<int32_t>()[2 * row + 1] == q);
    CHECK(gb.shape == (std::vector<int64_t>{P, 3}));
    for (int q = 0; q < P; ++q) CHECK(gb.data_as<double>()[3 * q + 2] == 10.0 * q);
  }
  // Grouped reducescatter: members of 2P+1 and P rows; values (r+1) * (k+1).
  std::vector<float> m0(2 * (2 * P + 1), r + 1.0f), m1(P, 2.0f * (r + 1));
  auto rs = kolo::grouped_reducescatter(
      "g.rs", {kolo::view_of(m0.data(), {2 * P + 1, 2}), kolo::view_of(m1.data(), {P})});
  const float ranks = P * (P + 1) / 2.0f;
  if (ok(rs.status(), "grouped_reducescatter") && rs->size() == 2) {
    CHECK((*rs)[0].shape == (std::vector<int64_t>{r == 0 ? 3 : 2, 2}));
    CHECK((*rs)[1].shape == (std::vector<int64_t>{1}));
    for (int64_t i = 0; i < (*rs)[0].num_elements(); ++i)
      CHECK((*rs)[0].data_as<float>()[i] == ranks);
    CHECK((*rs)[1].data_as<float>()[0] == 2 * ranks);
  }
  // Reducescatter with receive counts: the last rank gets every row.
  std::vector<int64_t> counts(P, 0);
  counts[P - 1] = 3;
  std::vector<int32_t> rows(3 * 2);
  std::iota(rows.begin(), rows.end(), r);
  auto rc =
      kolo::reducescatter("rs.counts", kolo::view_of(rows.data(), {3, 2}), {.recv_counts = counts});
  if (ok(rc.status(), "reducescatter recv_counts")) {
    CHECK(rc->shape == (std::vector<int64_t>{r == P - 1 ? 3 : 0, 2}));
    if (r == P - 1)
      for (int i = 0; i < 6; ++i) CHECK(rc->data_as<int32_t>()[i] == P * i + P * (P - 1) / 2);
  }
  // Objects: a string of 100000 bytes from the last rank; one of r bytes from each rank.
  std::string big = r == P - 1 ? std::string(100000, 'x') + "end" : "ignored";
  auto obj = kolo::broadcast_object("obj.b", big, P - 1);
  if (ok(obj.status(), "broadcast_object"))
    CHECK(obj->size() == 100003 && obj->substr(99998) == "xxend");
  auto empty = kolo::broadcast_object("obj.e", r == 0 ? "" : "not root", 0);
  if (ok(empty.status(), "broadcast_object empty")) CHECK(empty->empty());
  auto all = kolo::allgather_object("obj.a", std::string(static_cast<size_t>(r), 'a' + r));
  if (ok(all.status(), "allgather_object") && static_cast<int>(all->size()) == P)
    for (int q = 0; q < P; ++q) CHECK((*all)[q] == std::string(static_cast<size_t>(q), 'a' + q));
  CHECK(kolo::broadcast_object("obj.bad", "", P).status().code() ==
        kolo::StatusCode::kInvalidArgument);
  // Out-of-place blocking allreduce.
  std::vector<float> in(4, r + 1.0f), out(4, -1.0f);
  ok(kolo::allreduce("oop", kolo::view_of(in.data(), {4}), kolo::view_of(out.data(), {4})), "oop");
  CHECK(out[3] == ranks && in[3] == r + 1.0f);
  // Build queries agree with the build (kolorun starts tcp or shm, both always built).
  CHECK(kolo::built("tcp") && kolo::built("shm"));
  CHECK(kolo::built("nccl") == KOLO_TEST_BUILT_NCCL);
  CHECK(kolo::built("mpi") == KOLO_TEST_BUILT_MPI);
  CHECK(kolo::mpi_threads_supported() == kolo::built("mpi"));
  // join(): rank 0 joins last, 300 ms after the others (the coordinator sees their joins
  // first), and every rank learns so.
  if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto last = kolo::join();
  if (ok(last.status(), "join")) CHECK(*last == 0);
  // And then the last rank.
  if (r == P - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto again = kolo::join();
  if (ok(again.status(), "join again")) CHECK(*again == P - 1);
}

// Groups that differ between ranks fail on every rank with a Mismatch naming the ranks.
void grouped_mismatch() {
  const int r = kolo::rank();
  std::vector<float> x(4, 1.0f);
  std::vector<kolo::TensorView> views(r == 0 ? 2 : 3, kolo::view_of(x.data(), {2, 2}));
  auto g = kolo::grouped_allgather("gm", views);
  if (!g.ok()) std::printf("rank %d: error: %s\n", r, g.status().to_string().c_str());
  auto g2 = kolo::grouped_allgather("gm2", {kolo::view_of(x.data(), {1, r == 0 ? 2 : 3})});
  if (!g2.ok()) std::printf("rank %d: error: %s\n", r, g2.status().to_string().c_str());
  std::vector<kolo::TensorView> shapes{kolo::view_of(x.data(), {r == 0 ? 4 : 2})};
  auto rs = kolo::grouped_reducescatter("gmr", shapes);
  if (!rs.ok()) std::printf("rank %d: error: %s\n", r, rs.status().to_string().c_str());
  std::vector<int64_t> bad{-1, 5};
  auto c = kolo::reducescatter("rc", kolo::view_of(x.data(), {4}), {.recv_counts = bad});
  if (!c.ok()) std::printf("rank %d: error: %s\n", r, c.status().to_string().c_str());
  ok(kolo::barrier(), "barrier");
}

// Ranks submit 40 tensors in different orders from two threads each.
void orders() {
  const int r = kolo::rank(), P = kolo::size(), N = 40;
  std::vector<std::vector<float>> data(N);
  std::vector<kolo::Handle> hs(N);
  auto work = [&](int part) {
    for (int k = part; k < N; k += 2) {
      int i = (r % 2 == 0) ? k : N - 1 - k;
      data[i].assign(i + 1, 1.0f);
      hs[i] =
          kolo::allreduce_async("t" + std::to_string(i), kolo::view_of(data[i].data(), {i + 1}));
    }
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  for (int i = 0; i < N; ++i)
    if (ok(hs[i].wait(), "orders")) CHECK(data[i][i] == P);
}

void many() {
  const int N = 10000, P = kolo::size();
  std::vector<int32_t> v(N, 1);
  std::vector<kolo::Handle> hs;
  for (int i = 0; i < N; ++i)
    hs.push_back(kolo::allreduce_async("m" + std::to_string(i), kolo::view_of(&v[i], {})));
  for (auto& h : hs) ok(h.wait(), "many");
  CHECK(v[N - 1] == P && v[0] == P);
}

// Rank r's element i of a `fused` member (values every dtype used holds exactly): small, and
// for an average d(r) sums to 0 over the ranks, so that the mean is exactly base(i).
double fused_input(kolo::ReduceOp op, int r, int P, int64_t i) {
  if (op == kolo::ReduceOp::kProduct) return 1 + (r + i) % 2;
  if (op == kolo::ReduceOp::kAverage)
    return 3 + i % 4 + ((P % 2 == 1 && r == P - 1) ? 0 : (r % 2 == 0 ? 1 : -1));
  return 1 + (r * 7 + i * 3) % 5;
}

// Fused batches, grouped (one response of many members) and submitted one by one (fused by
// the planner): members of 0 and 1 elements and ones that straddle KOLO_SHM_CHUNK
// boundaries, every op, prescaled and postscaled, float32, float64 and int32; exact values.
// On shm the executor hands the members to the backend as they are (Note [Allreduce
// pieces]); on tcp they go through the fusion buffer.
template <typename T>
void fused_case(const char* name, kolo::AllreduceOptions o, bool grouped) {
  const kolo::Reduction& red = o.reduction;
  const int r = kolo::rank(), P = kolo::size();
  std::vector<int64_t> sizes = {0, 1, 1031, 0, 1, 3001, 7, 1, 0, 517, 2};
  for (int k = 0; k < 60; ++k) sizes.push_back(k % 3 == 0 ? 0 : 1);
  std::vector<std::vector<T>> members;
  std::vector<kolo::TensorView> views;
  for (int64_t n : sizes) {
    std::vector<T> m(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) m[i] = static_cast<T>(fused_input(red.op, r, P, i));
    members.push_back(std::move(m));
  }
  for (auto& m : members)
    views.push_back(kolo::view_of(m.data(), {static_cast<int64_t>(m.size())}));
  const std::string base = std::string(name) + (grouped ? ".g" : ".a");
  if (grouped) {
    ok(kolo::grouped_allreduce(base, views, o), name);
  } else {
    std::vector<kolo::Handle> hs;
    for (size_t k = 0; k < views.size(); ++k)
      hs.push_back(kolo::allreduce_async(base + "." + std::to_string(k), views[k], o));
    for (auto& h : hs) ok(h.wait(), name);
  }
  int wrong = 0;
  for (size_t k = 0; k < members.size(); ++k) {
    for (int64_t i = 0; i < sizes[k]; ++i) {
      double want = fused_input(red.op, 0, P, i) * red.prescale;
      for (int q = 1; q < P; ++q) {
        const double v = fused_input(red.op, q, P, i) * red.prescale;
        if (red.op == kolo::ReduceOp::kMin)
          want = std::min(want, v);
        else if (red.op == kolo::ReduceOp::kMax)
          want = std::max(want, v);
        else if (red.op == kolo::ReduceOp::kProduct)
          want *= v;
        else
          want += v;
      }
      if (red.op == kolo::ReduceOp::kAverage) want /= P;
      want *= red.postscale;
      if (static_cast<double>(members[k][i]) != want && wrong++ == 0)
        std::fprintf(stderr, "rank %d: %s member %zu element %lld is %g, expected %g\n", r,
                     base.c_str(), k, static_cast<long long>(i), static_cast<double>(members[k][i]),
                     want);
    }
  }
  CHECK(wrong == 0);
}

void fused() {
  using kolo::ReduceOp;
  for (bool grouped : {true, false}) {
    fused_case<float>("f.sum", {.reduction = {.op = ReduceOp::kSum}}, grouped);
    fused_case<float>("f.avg", {.reduction = {.op = ReduceOp::kAverage}}, grouped);
    fused_case<float>("f.min", {.reduction = {.op = ReduceOp::kMin}}, grouped);
    fused_case<float>("f.max", {.reduction = {.op = ReduceOp::kMax}}, grouped);
    fused_case<float>("f.prod", {.reduction = {.op = ReduceOp::kProduct}}, grouped);
    fused_case<float>("f.scaled", {.reduction = {ReduceOp::kSum, 2.0, 0.5}}, grouped);
    fused_case<double>("d.avg.scaled", {.reduction = {ReduceOp::kAverage, 2.0, 0.25}}, grouped);
    fused_case<int32_t>("i.sum", {.reduction = {.op = ReduceOp::kSum}}, grouped);
    fused_case<int32_t>("i.max", {.reduction = {.op = ReduceOp::kMax}}, grouped);
  }
}

// Prints each rank's error so the test can check the message on every rank.
void mismatch() {
  std::vector<float> v(kolo::rank() == 0 ? 3 : 5, 1.0f);
  kolo::Status st = kolo::allreduce("w", kolo::view_of(v.data(), {(int64_t)v.size()}));
  std::printf("rank %d error: %s\n", kolo::rank(), st.to_string().c_str());
  CHECK(st.code() == kolo::StatusCode::kMismatch);
}

// Run with KOLO_MISMATCH_TIME=1s. Rank 0 waits in broadcast 'x', rank 1 in barrier 'b', rank
// 2 (if any) in allreduce 'y': every rank fails with a Mismatch naming each rank's operation,
// which it prints. Then ranks that are merely late, or disjoint for less than the bound, run.
void mismatched_ops() {
  const int r = kolo::rank();
  std::vector<float> v(4, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  kolo::Status st = r == 0   ? kolo::broadcast("x", kolo::view_of(v.data(), {4}), 0)
                    : r == 1 ? kolo::barrier("b")
                             : kolo::allreduce("y", kolo::view_of(v.data(), {4}));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d error after %.1f s: %s\n", r, s, st.to_string().c_str());
  CHECK(st.code() == kolo::StatusCode::kMismatch);
  CHECK(s >= 0.9 && s < 10);
  // Late: rank 1 submits 3 s (three bounds) after the others, which wait with nothing else.
  if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
  ok(kolo::allreduce("late", kolo::view_of(v.data(), {4})), "late");
  CHECK(v[0] == static_cast<float>(kolo::size()));
  // Disjoint for 0.5 s: each rank submits one name, and the other's only after half a second.
  std::vector<float> p(4, 1.0f), q(4, 1.0f);
  auto first = r % 2 == 0 ? "p" : "q", second = r % 2 == 0 ? "q" : "p";
  auto h1 = kolo::allreduce_async(first, kolo::view_of(r % 2 == 0 ? p.data() : q.data(), {4}));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto h2 = kolo::allreduce_async(second, kolo::view_of(r % 2 == 0 ? q.data() : p.data(), {4}));
  ok(h1.wait(), "first");
  ok(h2.wait(), "second");
}

// Horovod's join (its test_horovod_join_allreduce, _allgather, _broadcast): for each rank j,
// j joins first; the others' average of 75 counts j as 0 (75 * (P - 1) / P, truncated), their
// allgather and broadcast (rooted at themselves) fail naming j, and then they join. Every join
// returns the same rank, not j.
void join_semantics() {
  const int r = kolo::rank(), P = kolo::size();
  for (int j = 0; j < P; ++j) {
    if (r != j) {
      std::vector<int32_t> a(5, 75);
      ok(kolo::allreduce("ja", kolo::view_of(a.data(), {5}),
                         {.reduction = {.op = kolo::ReduceOp::kAverage}}),
         "join allreduce");
      CHECK(a[4] == 75 * (P - 1) / P);
      std::vector<float> t(4, 1.0f);
      auto g = kolo::allgather("jg", kolo::view_of(t.data(), {4}));
      CHECK(g.status().code() == kolo::StatusCode::kMismatch);
      kolo::Status b = kolo::broadcast("jb", kolo::view_of(t.data(), {4}), r);
      CHECK(b.code() == kolo::StatusCode::kMismatch);
      const std::string joined = "cannot run while rank " + std::to_string(j) + " has joined";
      CHECK(g.status().message().find("allgather 'jg': " + joined) != std::string::npos);
      if (P == 2) CHECK(b.message().find("broadcast 'jb': " + joined) != std::string::npos);
    }
    auto last = kolo::join();
    if (ok(last.status(), "join")) {
      CHECK(*last != j);
      auto all = kolo::allgather_object("jr", std::to_string(*last));
      if (ok(all.status(), "join result"))
        for (const auto& s : *all) CHECK(s == std::to_string(*last));
    }
  }
}

// Rank 1 stops itself (SIGSTOP) after one allreduce; rank 0 keeps submitting and reports how
// long its first failure took and what it said.
void freeze() {
  std::vector<float> v(4, 1.0f);
  ok(kolo::allreduce("f0", kolo::view_of(v.data(), {4})), "f0");
  if (kolo::rank() == 1) ::raise(SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    kolo::Status st = kolo::allreduce("f" + std::to_string(i), kolo::view_of(v.data(), {4}));
    if (st.ok()) continue;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    std::printf("rank 0 failed after %lld ms: %s\n", static_cast<long long>(ms.count()),
                st.to_string().c_str());
    std::fflush(stdout);
    ++failures;
    return;
  }
}

void timeline(const std::string& dir) {
  // Every rank passes the same path: start_timeline replaces "{rank}" (trace.0.json, ...).
  ok(kolo::start_timeline(dir + "/trace.{rank}.json", true), "start_timeline");
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  auto h1 = kolo::allreduce_async("ta", kolo::view_of(a.data(), {4}));
  auto h2 = kolo::allreduce_async("tb", kolo::view_of(b.data(), {4}));
  // A group always runs fused, so the MEMCPY_*_FUSION phases appear whatever the timing (on a
  // backend without allreduce_pieces).
  std::vector<float> c(2, 1.0f), d(3, 1.0f);
  auto h3 = kolo::grouped_allreduce_async(
      "tgroup", {kolo::view_of(c.data(), {2}), kolo::view_of(d.data(), {3})});
  ok(h1.wait(), "ta");
  ok(h2.wait(), "tb");
  ok(h3.wait(), "tgroup");
  ok(kolo::stop_timeline(), "stop_timeline");
}

// Rank 1 submits "stuck", which rank 0 never does, so it stays in NEGOTIATE; each rank then
// writes DIR/ready.RANK (after a few flushes of its trace) and waits to be killed.
void hang(const std::string& dir) {
  ok(kolo::start_timeline(dir + "/trace.{rank}.json"), "start_timeline");
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  ok(kolo::allreduce("done", kolo::view_of(a.data(), {4})), "done");
  kolo::Handle stuck;
  if (kolo::rank() == 1) stuck = kolo::allreduce_async("stuck", kolo::view_of(b.data(), {4}));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::ofstream(dir + "/ready." + std::to_string(kolo::rank())) << "ready\n";
  std::this_thread::sleep_for(std::chrono::seconds(60));
}

// Six steps, one allreduce each; KOLO_TIMELINE_STEPS (set by the test) picks which are recorded.
// main() has marked two steps already, so these are steps 2 to 7.
void window() {
  for (int i = 0; i < 6; ++i) {
    std::vector<float> v(4, 1.0f);
    ok(kolo::allreduce("s" + std::to_string(i + 2), kolo::view_of(v.data(), {4})), "window");
    ok(kolo::mark_step(), "mark_step");
  }
}

// Rank 0 sends `mib` MiB to rank 1 in one alltoall; every other pair exchanges nothing. The
// other ranks are done at once and wait in the control plane's next round for ranks 0 and 1.
void uneven(int64_t mib) {
  const int r = kolo::rank();
  const int64_t rows = r == 0 ? mib << 18 : 0;  // floats: 2^18 per MiB
  // calloc: fresh zero pages, not written here, so that rank 0 is not late for lack of time.
  std::unique_ptr<float, decltype(&std::free)> in(
      static_cast<float*>(std::calloc(static_cast<size_t>(std::max<int64_t>(rows, 1)), 4)),
      &std::free);
  std::vector<int64_t> splits(static_cast<size_t>(kolo::size()), 0);
  if (r == 0) splits[1] = rows;
  std::vector<float> v(1, 1.0f);  // start together
  ok(kolo::allreduce("ready", kolo::view_of(v.data(), {1})), "ready");
  const auto start = std::chrono::steady_clock::now();
  auto got = kolo::alltoall("uneven", kolo::view_of(in.get(), {rows}), splits);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  if (got.ok())
    std::printf("rank %d uneven alltoall ok after %lld ms\n", r,
                static_cast<long long>(ms.count()));
  else
    std::printf("rank %d uneven alltoall failed after %lld ms: %s\n", r,
                static_cast<long long>(ms.count()), got.status().to_string().c_str());
  std::fflush(stdout);
  if (!got.ok()) ++failures;
  // A round of the control plane after it, so that every rank sees a failure of the job.
  ok(kolo::allreduce("after", kolo::view_of(v.data(), {1})), "after");
}

// Under KOLO_AUTOTUNE=1 (issue 30): every rank runs the same steps of grouped allreduces in
// buckets of kolo::tuned_bucket_bytes() bytes, as DistributedOptimizer and kolo-bench autotune
// do; after each step rank 0 sleeps `lag_ms` while rank 1 goes straight on, so the tuner's
// decisions (taken by rank 0's background thread between steps) reach the ranks at different
// points of their steps. Each rank prints, per step, the bucket size it used and the tuner's
// configuration in effect by then as it reads it; the test compares the ranks' lines.
void tune_agree(int steps, int lag_ms) {
  const int r = kolo::rank();
  std::vector<std::vector<float>> grads(8, std::vector<float>(16, 1.0f));  // 64 bytes each
  for (int step = 0; step < steps; ++step) {
    const int64_t bucket = kolo::tuned_bucket_bytes().value_or(int64_t{4} << 20);
    std::vector<kolo::Handle> handles;
    std::vector<kolo::TensorView> views;
    int64_t bytes = 0;
    auto submit = [&] {
      handles.push_back(kolo::grouped_allreduce_async(
          "grad.bucket" + std::to_string(handles.size()), std::move(views)));
      views.clear();
      bytes = 0;
    };
    for (auto& g : grads) {
      if (!views.empty() && bytes + 64 > bucket) submit();
      views.push_back(kolo::view_of(g.data(), {16}));
      bytes += 64;
    }
    submit();
    for (auto& h : handles)
      if (!ok(h.wait(), "tune_agree step")) return;
    ok(kolo::mark_step(), "mark_step");
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(lag_ms));
    const std::vector<kolo::AppliedTuning> history = kolo::autotune_history(kolo::steps_marked());
    std::string last = "none";
    if (!history.empty())
      last = std::to_string(history.back().from_step) + "/" +
             std::to_string(history.back().fusion_threshold) + "/" +
             std::to_string(history.back().bucket_bytes);
    std::printf("rank %d: tune step %lld: bucket %lld, %zu configurations in effect, last %s\n", r,
                static_cast<long long>(kolo::steps_marked()), static_cast<long long>(bucket),
                history.size(), last.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "ops";
  // Before init every submission fails with a clear message.
  std::vector<float> early(1);
  kolo::Status before = kolo::allreduce("early", kolo::view_of(early.data(), {1}));
  CHECK(before.code() == kolo::StatusCode::kPreconditionFailed);
  CHECK(kolo::mark_step().code() == kolo::StatusCode::kPreconditionFailed);
  CHECK(kolo::steps_marked() == 0);
  if (!ok(kolo::init(), "init")) return 1;
  // Steps count from init, on each rank alone.
  CHECK(kolo::steps_marked() == 0);
  ok(kolo::mark_step(), "mark_step");
  ok(kolo::mark_step(), "mark_step");
  CHECK(kolo::steps_marked() == 2);
  const int my_rank = kolo::rank();  // rank() reads 0 again after shutdown()
  if (scenario == "ops")
    every_op();
  else if (scenario == "orders")
    orders();
  else if (scenario == "many")
    many();
  else if (scenario == "fused")
    fused();
  else if (scenario == "mismatch")
    mismatch();
  else if (scenario == "mismatched_ops")
    mismatched_ops();
  else if (scenario == "join_semantics")
    join_semantics();
  else if (scenario == "freeze")
    freeze();
  else if (scenario == "timeline")
    timeline(argc > 2 ? argv[2] : "/tmp");
  else if (scenario == "hang")
    hang(argc > 2 ? argv[2] : "/tmp");
  else if (scenario == "window")
    window();
  else if (scenario == "api")
    api();
  else if (scenario == "grouped_mismatch")
    grouped_mismatch();
  else if (scenario == "tune_agree")
    tune_agree(argc > 2 ? std::atoi(argv[2]) : 24, argc > 3 ? std::atoi(argv[3]) : 300);
  else if (scenario == "uneven")
    uneven(argc > 2 ? std::atol(argv[2]) : 256);
  ok(kolo::shutdown(), "shutdown");
  kolo::Status after = kolo::allreduce("late", kolo::view_of(early.data(), {1}));
  if (after.message().find("kolo::shutdown() was called") == std::string::npos) ++failures;
  if (failures) return 1;
  std::printf("rank %d: %s passed\n", my_rank, scenario.c_str());
  return 0;
}
