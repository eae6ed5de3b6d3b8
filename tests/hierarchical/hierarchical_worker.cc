// One rank of the hierarchical allreduce's coordinator tests (hierarchical_test.cc): through
// kolo::init() and the public API, allreduces tensors of several dtypes, ops, scales and sizes
// (some fused, some larger than the fusion threshold, in-place and out-of-place), checks every
// element against its closed form, then allgathers rows of per-rank counts (none on some
// ranks, some fused), and prints one FNV-1a digest of all results, so that a run with
// KOLO_HIERARCHICAL_ALLREDUCE=1 or KOLO_HIERARCHICAL_ALLGATHER=1 can be compared byte for byte
// with a flat run.
// Prints "rank R: digest D" and "rank R: hierarchical worker passed"; exit 1 on a failure.
// Inputs are small integers, exact in every dtype whatever order ranks are combined in.
// With --steps N (the autotuner's test): instead, N training-like steps, each the same three
// allreduces (two beyond the piggy-back size, so that the data plane runs them) followed by
// kolo::mark_step(); then every rank prints "rank R: autotune history:" and each
// configuration applied as cycle/from_step/threshold/cycle_ns/bucket/hierarchical(0|1).
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace {

int failures = 0;
uint64_t digest = 1469598103934665603ull;

void hash(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) digest = (digest ^ p[i]) * 1099511628211ull;
}

// Rank r's element i: (r + 1) * (i % 5 + 1), so every rank differs and the sums stay small.
double input(int r, int64_t i) { return (r + 1.0) * static_cast<double>(i % 5 + 1); }

double expected(kolo::ReduceOp op, int P, int64_t i, double pre, double post) {
  const double unit = static_cast<double>(i % 5 + 1) * pre;
  switch (op) {
    case kolo::ReduceOp::kSum:
      return unit * P * (P + 1) / 2 * post;
    case kolo::ReduceOp::kAverage:
      return unit * (P + 1) / 2 * post;
    case kolo::ReduceOp::kMin:
      return unit * post;
    case kolo::ReduceOp::kMax:
      return unit * P * post;
    default:
      return 0;
  }
}

template <typename T>
void check(const std::string& name, int64_t count, kolo::AllreduceOptions opts, bool in_place) {
  const int r = kolo::rank(), P = kolo::size();
  std::vector<T> in(static_cast<size_t>(count)), out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) in[i] = static_cast<T>(input(r, i));
  const kolo::Status st = in_place ? kolo::allreduce(name, kolo::view_of(in.data(), {count}), opts)
                                   : kolo::allreduce(name, kolo::view_of(in.data(), {count}),
                                                     kolo::view_of(out.data(), {count}), opts);
  if (!st.ok()) {
    std::fprintf(stderr, "rank %d: %s: %s\n", r, name.c_str(), st.to_string().c_str());
    ++failures;
    return;
  }
  const std::vector<T>& result = in_place ? in : out;
  for (int64_t i = 0; i < count; ++i) {
    const T want = static_cast<T>(
        expected(opts.reduction.op, P, i, opts.reduction.prescale, opts.reduction.postscale));
    if (result[i] != want) {
      std::fprintf(stderr, "rank %d: %s[%" PRId64 "] = %g, expected %g\n", r, name.c_str(), i,
                   static_cast<double>(result[i]), static_cast<double>(want));
      ++failures;
      return;
    }
  }
  hash(result.data(), result.size() * sizeof(T));
}

// --steps: the same names every step, so that after the first step they hit the response
// cache, as a training loop's gradients do.
void steps(int n) {
  using kolo::ReduceOp;
  const int P = kolo::size();
  for (int step = 0; step < n; ++step) {
    check<float>("step.f32.sum", 1031, {}, true);
    check<int32_t>("step.i32.avg2", 3001,
                   {.reduction = {.op = ReduceOp::kAverage, .prescale = 2.0}}, false);
    check<double>("step.f64.scaled", P + 1, {.reduction = {.prescale = 2.0, .postscale = 0.5}},
                  true);
    if (!kolo::mark_step().ok()) ++failures;
  }
  std::string line = "rank " + std::to_string(kolo::rank()) + ": autotune history:";
  // The entries in effect: a decision for a later step may not have reached every rank yet.
  for (const kolo::AppliedTuning& a : kolo::autotune_history(kolo::steps_marked()))
    line += " " + std::to_string(a.cycle) + "/" + std::to_string(a.from_step) + "/" +
            std::to_string(a.fusion_threshold) + "/" + std::to_string(a.cycle_time_ns) + "/" +
            std::to_string(a.bucket_bytes) + "/" + (a.hierarchical_allreduce ? "1" : "0");
  std::printf("%s\n", line.c_str());
}

void one_of_each() {
  const int P = kolo::size();
  using kolo::ReduceOp;
  // P - 1 and P + 1 elements leave some ranks' shards one element short; 3 MiB of float32 is
  // fused with nothing else under the default 4 MiB threshold, 6 MiB of it exceeds it.
  for (int64_t count : {int64_t{1}, int64_t{P - 1}, int64_t{P + 1}, int64_t{1031}, int64_t{3 << 18},
                        int64_t{6 << 18}}) {
    const std::string n = std::to_string(count);
    check<float>("f32.sum." + n, count, {}, true);
    check<float>("f32.avg." + n, count, {.reduction = {.op = ReduceOp::kAverage}}, false);
    check<double>("f64.scaled." + n, count, {.reduction = {.prescale = 2.0, .postscale = 0.5}},
                  true);
    check<int32_t>("i32.max." + n, count, {.reduction = {.op = ReduceOp::kMax}}, false);
    check<int64_t>("i64.min." + n, count, {.reduction = {.op = ReduceOp::kMin}}, true);
    // (P + 1) / 2 is whole for odd P only: an even job averages integers that divide evenly.
    if (P % 2 == 1)
      check<int64_t>("i64.avg." + n, count, {.reduction = {.op = ReduceOp::kAverage}}, false);
    check<int32_t>("i32.avg2." + n, count,
                   {.reduction = {.op = ReduceOp::kAverage, .prescale = 2.0}}, false);
  }
  // Tensors submitted together, so that the coordinator fuses them into one allreduce whose
  // buffer the hierarchy splits without regard to where one tensor ends.
  const int r = kolo::rank();
  std::vector<std::vector<float>> batch(8);
  std::vector<kolo::Handle> handles;
  for (size_t t = 0; t < batch.size(); ++t) {
    batch[t].resize(100 + 37 * t);
    for (size_t i = 0; i < batch[t].size(); ++i) batch[t][i] = static_cast<float>(input(r, i));
    handles.push_back(kolo::allreduce_async(
        "batch." + std::to_string(t), kolo::view_of(batch[t].data(), {int64_t(batch[t].size())})));
  }
  for (size_t t = 0; t < batch.size(); ++t) {
    if (!handles[t].wait().ok()) ++failures;
    for (size_t i = 0; i < batch[t].size(); ++i)
      if (batch[t][i] != static_cast<float>(expected(ReduceOp::kSum, P, i, 1, 1))) {
        std::fprintf(stderr, "rank %d: batch.%zu[%zu] = %g\n", r, t, i, batch[t][i]);
        ++failures;
        break;
      }
    hash(batch[t].data(), batch[t].size() * sizeof(float));
  }
}

// Rank q contributes (q * 3 + k) % 4 rows of `cols` values, row j of it q * 1000 + j, so that
// some ranks contribute nothing; every rank checks the whole concatenation in rank order.
void allgathers() {
  const int r = kolo::rank(), P = kolo::size();
  auto rows_of = [](int q, int k) { return static_cast<int64_t>((q * 3 + k) % 4); };
  std::vector<std::vector<double>> inputs;
  std::vector<kolo::Handle> handles;
  for (int k = 0; k < 6; ++k) {
    const int64_t cols = k < 3 ? 7 : 20000;  // small ones fuse, large ones do not
    inputs.emplace_back(static_cast<size_t>(rows_of(r, k) * cols));
    for (int64_t j = 0; j < rows_of(r, k) * cols; ++j) inputs.back()[j] = r * 1000.0 + j;
    handles.push_back(kolo::allgather_async(
        "gather." + std::to_string(k), kolo::view_of(inputs.back().data(), {rows_of(r, k), cols})));
  }
  for (int k = 0; k < 6; ++k) {
    const int64_t cols = k < 3 ? 7 : 20000;
    if (kolo::Status st = handles[k].wait(); !st.ok()) {
      std::fprintf(stderr, "rank %d: gather.%d: %s\n", r, k, st.to_string().c_str());
      ++failures;
      continue;
    }
    std::vector<double> want;
    for (int q = 0; q < P; ++q)
      for (int64_t j = 0; j < rows_of(q, k) * cols; ++j) want.push_back(q * 1000.0 + j);
    const auto* got = static_cast<const double*>(handles[k].output_data());
    if (handles[k].output_shape() !=
            std::vector<int64_t>{static_cast<int64_t>(want.size()) / cols, cols} ||
        (!want.empty() && std::memcmp(got, want.data(), want.size() * sizeof(double)) != 0)) {
      std::fprintf(stderr, "rank %d: gather.%d: wrong result\n", r, k);
      ++failures;
      continue;
    }
    hash(want.data(), want.size() * sizeof(double));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n_steps = 0;
  if (argc == 3 && std::strcmp(argv[1], "--steps") == 0) {
    n_steps = std::atoi(argv[2]);
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--steps N]\n", argv[0]);
    return 2;
  }
  if (kolo::Status st = kolo::init(); !st.ok()) {
    std::fprintf(stderr, "init: %s\n", st.to_string().c_str());
    return 1;
  }
  const int r = kolo::rank();
  if (n_steps > 0)
    steps(n_steps);
  else
    one_of_each(), allgathers();
  std::printf("rank %d: digest %016" PRIx64 "\n", r, digest);
  const kolo::Status down = kolo::shutdown();
  if (!down.ok() || failures > 0) {
    std::fprintf(stderr, "rank %d: %d failures; shutdown: %s\n", r, failures,
                 down.to_string().c_str());
    return 1;
  }
  std::printf("rank %d: hierarchical worker passed\n", r);
  return 0;
}
