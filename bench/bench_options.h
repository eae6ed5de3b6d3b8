// Command-line options of the collective benchmarks (kolo-bench allreduce|allgather|...).
#pragma once

#include <cstdint>
#include <string>

#include "bench/flags.h"
#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::bench {

enum class Collective { kAllreduce, kAllgather, kBroadcast, kAlltoall, kReducescatter };

// The initial values are the defaults.
struct CollectiveOptions {
  Collective collective = Collective::kAllreduce;
  std::string backend = "tcp";          // --backend tcp|mpi
  uint64_t min_bytes = 4096;            // -b
  uint64_t max_bytes = 256ull << 20;    // -e
  int factor = 2;                       // -f: each size is the previous one times this
  int iters = 20;                       // -n: timed iterations per size
  int warmup = 5;                       // -w: untimed iterations per size first
  int rounds = 1;                       // -r: rounds per size, backend and raw library alternating
  DataType dtype = DataType::kFloat32;  // -d
  ReduceOp op = ReduceOp::kSum;         // -o
  bool check = false;                   // --check: deterministic inputs, outputs verified
  bool copy = false;                    // --copy: also time a copy of each size (host buffers)
  std::string json_path;                // --json FILE: every row, written by rank 0
};

const char* collective_name(Collective c);

// The command line of `options.collective`'s subcommand, filling `options` (which must outlive
// the result); its check rejects -b > -e.
CommandLine collective_command_line(CollectiveOptions& options);

}  // namespace kolo::bench
