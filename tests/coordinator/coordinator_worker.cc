// One rank of a coordinator multi-process test: `coordinator_worker <scenario> [dir]`.
// Prints "rank R: <scenario> passed" on success; failures print what differed and exit 1.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"

namespace {

int failures = 0;
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "rank %d: check failed: %s\n", kolo::rank(), #cond); \
      ++failures;                                                              \
    }                                                                          \
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
  auto h2 = kolo::allreduce_async("avg", kolo::view_of(avg.data(), {8}), {kolo::ReduceOp::kAverage});
  auto h3 = kolo::allreduce_async("max", kolo::view_of(mx.data(), {8}), {kolo::ReduceOp::kMax});
  ok(h3.wait(), "max");
  ok(h1.wait(), "sum");
  ok(h2.wait(), "avg");
  CHECK(sum[7] == P * (P + 1) / 2.0f);
  CHECK(avg[0] == (P + 1) / 2.0f);
  CHECK(mx[3] == P);
  std::vector<double> g1(2, r), g2(3, 2.0 * r);
  ok(kolo::grouped_allreduce("group", {kolo::view_of(g1.data(), {2}), kolo::view_of(g2.data(), {3})}),
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
  if (ok(exchanged.status(), "alltoall"))
    for (int q = 0; q < P; ++q) CHECK(exchanged->data_as<float>()[q] == q);
  std::vector<float> rs(2 * P, 1.0f);
  auto scattered = kolo::reducescatter("rs", kolo::view_of(rs.data(), {2 * P}));
  if (ok(scattered.status(), "reducescatter")) {
    CHECK(scattered->shape[0] == 2);
    CHECK(scattered->data_as<float>()[1] == P);
  }
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
      hs[i] = kolo::allreduce_async("t" + std::to_string(i), kolo::view_of(data[i].data(), {i + 1}));
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

// Prints each rank's error so the test can check the message on every rank.
void mismatch() {
  std::vector<float> v(kolo::rank() == 0 ? 3 : 5, 1.0f);
  kolo::Status st = kolo::allreduce("w", kolo::view_of(v.data(), {(int64_t)v.size()}));
  std::printf("rank %d error: %s\n", kolo::rank(), st.to_string().c_str());
  CHECK(st.code() == kolo::StatusCode::kMismatch);
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
  // A group always runs fused, so the MEMCPY_*_FUSION phases appear whatever the timing.
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
  if (scenario == "ops") every_op();
  else if (scenario == "orders") orders();
  else if (scenario == "many") many();
  else if (scenario == "mismatch") mismatch();
  else if (scenario == "freeze") freeze();
  else if (scenario == "timeline") timeline(argc > 2 ? argv[2] : "/tmp");
  else if (scenario == "hang") hang(argc > 2 ? argv[2] : "/tmp");
  else if (scenario == "window") window();
  ok(kolo::shutdown(), "shutdown");
  kolo::Status after = kolo::allreduce("late", kolo::view_of(early.data(), {1}));
  if (after.message().find("kolo::shutdown() was called") == std::string::npos) ++failures;
  if (failures) return 1;
  std::printf("rank %d: %s passed\n", my_rank, scenario.c_str());
  return 0;
}
