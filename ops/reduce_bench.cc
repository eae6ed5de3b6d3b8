// reduce_into throughput (GB/s counts the bytes read and written: 3 x count x element size),
// and KOLO_REDUCTION=exact's per-element conversions (ops/exact.h; items/s are elements).
// Reports only; asserts nothing. Run: build/bin/reduce_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ops/exact.h"
#include "ops/reduce.h"

namespace {

template <kolo::DataType T>
void BM_ReduceSum(benchmark::State& state) {
  const int64_t n = state.range(0);
  const size_t es = kolo::dtype_size(T);
  std::vector<char> dst(n * es, 0), src(n * es, 0);
  for (auto _ : state) {
    kolo::ops::reduce_into(T, kolo::ReduceOp::kSum, dst.data(), src.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 * n * es);
}

BENCHMARK(BM_ReduceSum<kolo::DataType::kFloat32>)->Arg(1 << 12)->Arg(1 << 20)->Arg(1 << 24);
BENCHMARK(BM_ReduceSum<kolo::DataType::kFloat16>)->Arg(1 << 12)->Arg(1 << 20)->Arg(1 << 24);
BENCHMARK(BM_ReduceSum<kolo::DataType::kBFloat16>)->Arg(1 << 12)->Arg(1 << 20)->Arg(1 << 24);

// Gradient-like values: normal, so exponents spread over a few binades.
template <kolo::DataType T>
std::vector<char> normal_values(int64_t n) {
  std::vector<char> out(n * kolo::dtype_size(T));
  std::mt19937 rng(1);
  std::normal_distribution<double> d;
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (T == kolo::DataType::kFloat64) {
      reinterpret_cast<double*>(out.data())[i] = d(rng);
    } else {
      reinterpret_cast<float*>(out.data())[i] = static_cast<float>(d(rng));
    }
  }
  return out;
}

template <kolo::DataType T>
void BM_ExactEncode(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<char> in = normal_values<T>(n);
  std::vector<int64_t> acc(n * kolo::ops::exact_limbs(T));
  for (auto _ : state) {
    kolo::ops::exact_encode(T, in.data(), n, acc.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

template <kolo::DataType T>
void BM_ExactRound(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<char> out = normal_values<T>(n);
  std::vector<int64_t> acc(n * kolo::ops::exact_limbs(T));
  kolo::ops::exact_encode(T, out.data(), n, acc.data());
  kolo::ops::exact_accumulate(T, out.data(), n, acc.data());  // a sum of two
  for (auto _ : state) {
    kolo::ops::exact_round(T, acc.data(), n, 1, out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

BENCHMARK(BM_ExactEncode<kolo::DataType::kFloat32>)->Arg(1 << 20);
BENCHMARK(BM_ExactRound<kolo::DataType::kFloat32>)->Arg(1 << 20);
BENCHMARK(BM_ExactEncode<kolo::DataType::kFloat64>)->Arg(1 << 18);
BENCHMARK(BM_ExactRound<kolo::DataType::kFloat64>)->Arg(1 << 18);

}  // namespace

BENCHMARK_MAIN();
