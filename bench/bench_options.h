// Command-line options of the collective benchmarks (kolo-bench allreduce|allgather|...).
#pragma once

#include <cstdint>
#include <string>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::bench {

enum class Collective { kAllreduce, kAllgather, kBroadcast, kAlltoall, kReducescatter };

struct CollectiveOptions {
  Collective collective = Collective::kAllreduce;
  std::string backend = "tcp";          // --backend tcp|mpi
  uint64_t min_bytes = 4096;            // -b
  uint64_t max_bytes = 256ull << 20;    // -e
  uint64_t factor = 2;                  // -f: each size is the previous one times this
  int iters = 20;                       // -n: timed iterations per size
  int warmup = 5;                       // -w: untimed iterations per size first
  DataType dtype = DataType::kFloat32;  // -d
  ReduceOp op = ReduceOp::kSum;         // -o
  bool check = false;                   // --check: deterministic inputs, outputs verified
  std::string json_path;                // --json FILE: every row, written by rank 0
};

// "allreduce" -> kAllreduce, ...; nullptr-like failure as InvalidArgument listing the names.
Result<Collective> parse_collective(const std::string& name);
const char* collective_name(Collective c);

// Parses argv[1..] (argv[0] is the subcommand). InvalidArgument naming the flag, the value
// and the accepted form; "--help" returns Aborted with the usage text as its message.
Result<CollectiveOptions> parse_collective_options(Collective collective, int argc, char** argv);

// The usage text for the collective subcommands.
std::string collective_usage();

}  // namespace kolo::bench
