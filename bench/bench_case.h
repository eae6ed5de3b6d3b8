// One timed collective call of the benchmark: which collective, on which buffers, and how it
// runs through a Kolo backend or through raw MPI.
#pragma once

#include <cstdint>

#include "backends/backend.h"
#include "bench/bench_options.h"
#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::bench {

// Buffer layout as in nccl-tests: `count` elements make up the whole buffer that the size
// column reports (allreduce/broadcast data, allgather output, reducescatter input, alltoall
// send and receive buffers); `block` = count / ranks for the per-rank collectives.
struct BenchCase {
  Collective collective = Collective::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int ranks = 1;
  int64_t count = 0;
  int64_t block = 0;
  const void* input = nullptr;  // broadcast reads and writes `output` on every rank
  void* output = nullptr;
  // KOLO_REDUCTION=exact: a float sum or average allreduce runs as the executor runs it
  // (backends/exact_allreduce.h): accumulators, an int64 allreduce of them, the rounding.
  bool exact = false;
};

// Runs the case once through `backend` (equal per-rank splits; broadcast from rank 0).
Status run_backend_case(Backend& backend, const BenchCase& c);

// nccl-tests' bus-bandwidth factor: allreduce 2(n-1)/n, allgather, reducescatter and
// alltoall (n-1)/n, broadcast 1. busbw = algbw * factor compares with the link speed.
double busbw_factor(Collective collective, int ranks);

}  // namespace kolo::bench
