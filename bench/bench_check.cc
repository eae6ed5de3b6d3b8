#include "bench/bench_check.h"

#include <algorithm>
#include <cmath>

#include "bench/typed_values.h"

namespace kolo::bench {

namespace {

// Rank r's element i of a reduction input: 1..3 (1..2 for products, so that a product over
// many ranks stays small).
double reduce_input(ReduceOp op, int r, int64_t i) {
  return op == ReduceOp::kProduct ? 1 + (r + i) % 2 : 1 + (r + i) % 3;
}

double reduced(ReduceOp op, int ranks, int64_t i) {
  double acc = reduce_input(op, 0, i);
  for (int r = 1; r < ranks; ++r) {
    const double v = reduce_input(op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
    }
  }
  return op == ReduceOp::kAverage ? acc / ranks : acc;
}

// Element k of the block that rank `from` sends to rank `to` (allgather: to is ignored).
double block_value(int from, int to, int64_t k) { return 1 + (from * 3 + to + k) % 5; }

}  // namespace

void fill_inputs(const BenchCase& c, int rank) {
  void* in = const_cast<void*>(c.input);
  switch (c.collective) {
    case Collective::kAllreduce:
    case Collective::kReducescatter:
      for (int64_t i = 0; i < c.count; ++i)
        store_value(c.dtype, in, i, reduce_input(c.op, rank, i));
      break;
    case Collective::kAllgather:
      for (int64_t k = 0; k < c.block; ++k) store_value(c.dtype, in, k, block_value(rank, 0, k));
      break;
    case Collective::kBroadcast:
      for (int64_t i = 0; i < c.count; ++i)
        store_value(c.dtype, c.output, i, rank == 0 ? block_value(0, 0, i) : 0);
      break;
    case Collective::kAlltoall:
      for (int to = 0; to < c.ranks; ++to)
        for (int64_t k = 0; k < c.block; ++k)
          store_value(c.dtype, in, to * c.block + k, block_value(rank, to, k));
      break;
  }
}

int64_t count_wrong(const BenchCase& c, int rank) {
  int64_t wrong = 0;
  auto check = [&](int64_t index, double expected) {
    const double got = load_value(c.dtype, c.output, index);
    if (!(std::fabs(got - expected) <= tolerance(c.dtype, c.op, expected))) ++wrong;
  };
  switch (c.collective) {
    case Collective::kAllreduce:
      for (int64_t i = 0; i < c.count; ++i) check(i, reduced(c.op, c.ranks, i));
      break;
    case Collective::kReducescatter:
      for (int64_t k = 0; k < c.block; ++k) check(k, reduced(c.op, c.ranks, rank * c.block + k));
      break;
    case Collective::kAllgather:
      for (int from = 0; from < c.ranks; ++from)
        for (int64_t k = 0; k < c.block; ++k) check(from * c.block + k, block_value(from, 0, k));
      break;
    case Collective::kBroadcast:
      for (int64_t i = 0; i < c.count; ++i) check(i, block_value(0, 0, i));
      break;
    case Collective::kAlltoall:
      for (int from = 0; from < c.ranks; ++from)
        for (int64_t k = 0; k < c.block; ++k) check(from * c.block + k, block_value(from, rank, k));
      break;
  }
  return wrong;
}

}  // namespace kolo::bench
