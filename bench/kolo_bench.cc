// kolo-bench: one binary for every Kolo benchmark, `kolo-bench <command> [options]`.
// Collective commands live in collectives_bench.cc; fusion and latency (coordinator
// benchmarks) in coordinator_bench.cc when that file is part of the build.
#include <cstdio>
#include <cstring>
#include <string>

#include "bench/bench_options.h"

namespace kolo::bench {
int run_collective_bench(Collective collective, int argc, char** argv);
}

#ifdef KOLO_BENCH_COORDINATOR
int kolo_bench_fusion(int argc, char** argv);
int kolo_bench_latency(int argc, char** argv);
#endif

namespace {
void usage(FILE* out) {
  std::fprintf(out,
               "usage: kolo-bench <command> [options]   (kolo-bench <command> --help)\n"
               "commands: allreduce allgather broadcast alltoall reducescatter"
#ifdef KOLO_BENCH_COORDINATOR
               " fusion latency"
#endif
               "\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    usage(stdout);
    return 0;
  }
  // Each command sees argv from its own name on, as if it were argv[0].
  auto collective = kolo::bench::parse_collective(command);
  if (collective.ok()) return kolo::bench::run_collective_bench(*collective, argc - 1, argv + 1);
#ifdef KOLO_BENCH_COORDINATOR
  if (command == "fusion") return kolo_bench_fusion(argc - 1, argv + 1);
  if (command == "latency") return kolo_bench_latency(argc - 1, argv + 1);
#endif
  std::fprintf(stderr, "kolo-bench: unknown command '%s'\n", command.c_str());
  usage(stderr);
  return 2;
}
