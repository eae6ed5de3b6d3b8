// Coordinator benchmarks (kolo-bench fusion | latency). They report, they do not assert.
//
// fusion: one ResNet-50 training step's gradient traffic: its 161 float32 gradient tensors
//   (25,557,032 elements, 102 MB) submitted in backward order and then waited, as a gradient
//   hook would. Rows: default fusion threshold, fusion off, one flat 102 MB allreduce of the
//   same bytes through the coordinator, and the default with the timeline recording.
// latency: a 4-byte allreduce through the coordinator (submit + negotiate + execute) versus
//   the same call on a raw backend, and the rate of 10,000 four-byte tensors in one step.
//   In steady state with few ranks the data rides in the negotiation message (Note
//   [Piggy-back] in coordinator/piggyback.cc), so the coordinator costs one exchange plus
//   two thread hand-offs: 2 ranks on one 2-core VM, medians of 10 runs of
//   `kolorun -np 2 kolo-bench latency --iters 500`: 50.5 us through the coordinator against
//   32 us raw (98-100 us before piggy-backing and the spin-before-sleep hand-offs).
//
// Run under kolorun, e.g.  kolorun -np 2 build/bin/kolo-bench fusion --iters 10
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "kolo/kolo.h"
#include "rendezvous/world.h"

namespace {

using Clock = std::chrono::steady_clock;

// ResNet-50's parameter tensors in forward order: conv weights [out, in, kh, kw], each
// followed by its batch norm's weight and bias [c], and the final fc weight and bias.
std::vector<std::vector<int64_t>> resnet50_shapes() {
  std::vector<std::vector<int64_t>> shapes;
  auto conv_bn = [&](int64_t out, int64_t in, int64_t k) {
    shapes.push_back({out, in, k, k});
    shapes.push_back({out});
    shapes.push_back({out});
  };
  conv_bn(64, 3, 7);
  const int64_t blocks[4] = {3, 4, 6, 3};
  const int64_t widths[4] = {64, 128, 256, 512};
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t w = widths[stage], out = 4 * w;
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      conv_bn(w, in, 1);                // 1x1 reduce
      conv_bn(w, w, 3);                 // 3x3
      conv_bn(out, w, 1);               // 1x1 expand
      if (b == 0) conv_bn(out, in, 1);  // projection shortcut
      in = out;
    }
  }
  shapes.push_back({1000, 2048});
  shapes.push_back({1000});
  return shapes;
}

int64_t elements(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int int_flag(int argc, char** argv, const char* flag, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == flag) return std::atoi(argv[i + 1]);
  return fallback;
}

bool check(const kolo::Status& st, const char* what) {
  if (st.ok()) return true;
  std::fprintf(stderr, "kolo-bench: %s: %s\n", what, st.to_string().c_str());
  return false;
}

// Median of per-iteration times in milliseconds.
double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One step: every gradient submitted in backward order, then all waited.
bool resnet_step(std::vector<std::vector<float>>& grads,
                 const std::vector<std::vector<int64_t>>& shapes, int step) {
  std::vector<kolo::Handle> hs;
  hs.reserve(grads.size());
  for (size_t k = grads.size(); k-- > 0;)
    hs.push_back(kolo::allreduce_async("grad." + std::to_string(k),
                                       kolo::view_of(grads[k].data(), shapes[k]),
                                       {kolo::ReduceOp::kAverage}));
  for (auto& h : hs)
    if (!check(h.wait(), "resnet step")) return false;
  return true;
}

// Re-initialises Kolo with KOLO_FUSION_THRESHOLD set (or unset) and times `iters` steps.
bool run_mode(const char* label, const char* threshold, bool flat, bool timeline, int warmup,
              int iters, const std::vector<std::vector<int64_t>>& shapes) {
  if (threshold)
    setenv("KOLO_FUSION_THRESHOLD", threshold, 1);
  else
    unsetenv("KOLO_FUSION_THRESHOLD");
  if (!check(kolo::init(), "init")) return false;
  // start_timeline replaces {rank}: one file per rank.
  if (timeline &&
      !check(kolo::start_timeline("/tmp/kolo-bench-fusion-rank{rank}.json"), "start_timeline"))
    return false;
  int64_t total = 0;
  for (const auto& s : shapes) total += elements(s);
  std::vector<std::vector<float>> grads;
  std::vector<float> flat_buffer;
  if (flat)
    flat_buffer.assign(total, 1.0f);
  else
    for (const auto& s : shapes) grads.emplace_back(elements(s), 1.0f);
  std::vector<double> times;
  for (int i = 0; i < warmup + iters; ++i) {
    auto t0 = Clock::now();
    bool ok = flat ? check(kolo::allreduce("flat", kolo::view_of(flat_buffer.data(), {total}),
                                           {kolo::ReduceOp::kAverage}),
                           "flat allreduce")
                   : resnet_step(grads, shapes, i);
    if (!ok) return false;
    if (i >= warmup)
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  if (kolo::rank() == 0) {
    double ms = median_ms(times);
    std::printf("%-28s %8d %12.3f %12.2f\n", label, kolo::size(), ms,
                total * 4.0 / (ms * 1e-3) / 1e9);
    std::fflush(stdout);
  }
  if (timeline) (void)kolo::stop_timeline();
  return check(kolo::shutdown(), "shutdown");
}

}  // namespace

int kolo_bench_fusion(int argc, char** argv) {
  const int iters = int_flag(argc, argv, "--iters", 10);
  const int warmup = int_flag(argc, argv, "--warmup", 2);
  auto shapes = resnet50_shapes();
  int64_t total = 0;
  for (const auto& s : shapes) total += elements(s);
  const char* user_threshold = std::getenv("KOLO_FUSION_THRESHOLD");
  std::string keep = user_threshold ? user_threshold : "";
  const char* env_rank = std::getenv("KOLO_RANK");  // only rank 0 prints; init comes later
  const bool root = env_rank == nullptr || std::string(env_rank) == "0";
  if (root)
    std::printf(
      "# ResNet-50 gradients: %zu float32 tensors, %lld elements (%.1f MB); median of %d steps\n",
      shapes.size(), static_cast<long long>(total), total * 4 / 1e6, iters);
  if (root) std::printf("%-28s %8s %12s %12s\n", "mode", "ranks", "step_ms", "algbw_GB/s");
  const char* def = keep.empty() ? nullptr : keep.c_str();
  bool ok = run_mode("fusion default", def, false, false, warmup, iters, shapes) &&
            run_mode("fusion off", "0", false, false, warmup, iters, shapes) &&
            run_mode("flat 102 MB allreduce", def, true, false, warmup, iters, shapes) &&
            run_mode("fusion default + timeline", def, false, true, warmup, iters, shapes);
  return ok ? 0 : 1;
}

int kolo_bench_latency(int argc, char** argv) {
  const int iters = int_flag(argc, argv, "--iters", 1000);
  const int many = int_flag(argc, argv, "--tensors", 10000);
  if (!check(kolo::init(), "init")) return 1;
  const bool root = kolo::rank() == 0;
  float x = 1.0f;
  std::vector<double> coord_us;
  for (int i = 0; i < iters + 10; ++i) {
    auto t0 = Clock::now();
    if (!check(kolo::allreduce("lat", kolo::view_of(&x, {1})), "allreduce")) return 1;
    if (i >= 10)
      coord_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  // The same call on a raw backend of its own, bypassing the coordinator.
  double raw = -1;
  // The raw comparison needs kolorun's store; under mpirun the world seen here has one rank.
  auto world = kolo::world_from_env();
  if (!check(world.status(), "world")) return 1;
  if (kolo::size() > 1 && world->size != kolo::size() && kolo::rank() == 0) {
    std::fprintf(stderr, "latency: the raw backend comparison runs under kolorun only\n");
  }
  if (kolo::size() > 1 && world->size == kolo::size()) {
    const kolo::BackendContext ctx = kolo::backend_context(*world, "kolo-bench/latency-raw");
    auto backend = kolo::create_backend("tcp", ctx);
    if (!check(backend.status(), "raw backend")) return 1;
    std::vector<double> raw_us;
    for (int i = 0; i < iters + 10; ++i) {
      auto t0 = Clock::now();
      if (!check((*backend)->allreduce(&x, &x, 1, kolo::DataType::kFloat32, {}), "raw allreduce"))
        return 1;
      if (i >= 10)
        raw_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    raw = median_ms(raw_us);
  }
  // Rate of many tiny tensors in one step (twice: the second runs from the response cache).
  std::vector<float> small(many, 1.0f);
  double rate = 0;
  for (int step = 0; step < 2; ++step) {
    auto t0 = Clock::now();
    std::vector<kolo::Handle> hs;
    hs.reserve(many);
    for (int i = 0; i < many; ++i)
      hs.push_back(
          kolo::allreduce_async("tiny." + std::to_string(i), kolo::view_of(&small[i], {1})));
    for (auto& h : hs)
      if (!check(h.wait(), "tiny allreduce")) return 1;
    rate = many / std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (root) {
    std::printf("%-40s %8s %12s\n", "measurement", "ranks", "value");
    std::printf("%-40s %8d %12.1f\n", "coordinator allreduce 4 B, median us", kolo::size(),
                median_ms(coord_us));
    if (raw >= 0) {
      std::printf("%-40s %8d %12.1f\n", "raw tcp backend allreduce 4 B, median us",
                  kolo::size(), raw);
    }
    std::printf("%-40s %8d %12.0f\n", "10k x 4 B tensors/s (cached step)", kolo::size(), rate);
  }
  return check(kolo::shutdown(), "shutdown") ? 0 : 1;
}
