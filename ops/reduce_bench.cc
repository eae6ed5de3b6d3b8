// reduce_into throughput (GB/s counts the bytes read and written: 3 x count x element size).
// Reports only; asserts nothing. Run: build/bin/reduce_bench
#include <benchmark/benchmark.h>

#include <vector>

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

}  // namespace

BENCHMARK_MAIN();
