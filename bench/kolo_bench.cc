// kolo-bench: one binary for every Kolo benchmark, `kolo-bench <command> [options]`.
// Collective commands live in collectives_bench.cc; fusion and latency (coordinator
// benchmarks) in coordinator_bench.cc when that file is part of the build. Every command
// parses its options with bench/flags.h, and reads Kolo's knobs from the KnobSet that main()
// parses from the environment once (as kolo::init() does), never with getenv.
#include <cstdio>
#include <string>
#include <string_view>

#include "bench/bench_options.h"
#include "common/knobs.h"

namespace kolo::bench {
int run_collective_bench(Collective collective, const KnobSet& knobs, int argc, char** argv);
#ifdef KOLO_BENCH_COORDINATOR
int run_fusion_bench(const KnobSet& knobs, int argc, char** argv);
int run_autotune_bench(const KnobSet& knobs, int argc, char** argv);
int run_latency_bench(const KnobSet& knobs, int argc, char** argv);
int run_elastic_bench(const KnobSet& knobs, int argc, char** argv);
int run_zero_bench(const KnobSet& knobs, int argc, char** argv);
#endif
}  // namespace kolo::bench

namespace {

using kolo::bench::Collective;

struct Subcommand {
  std::string_view name;
  std::string_view summary;
  // Sees argv from the command's name on, as if it were argv[0].
  int (*main)(const kolo::KnobSet& knobs, int argc, char** argv);
};

template <Collective c>
int collective_main(const kolo::KnobSet& knobs, int argc, char** argv) {
  return kolo::bench::run_collective_bench(c, knobs, argc, argv);
}

constexpr Subcommand kCommands[] = {
    {"allreduce", "time a backend's allreduce over a range of sizes",
     collective_main<Collective::kAllreduce>},
    {"allgather", "time a backend's allgather", collective_main<Collective::kAllgather>},
    {"broadcast", "time a backend's broadcast", collective_main<Collective::kBroadcast>},
    {"alltoall", "time a backend's alltoall", collective_main<Collective::kAlltoall>},
    {"reducescatter", "time a backend's reducescatter",
     collective_main<Collective::kReducescatter>},
#ifdef KOLO_BENCH_COORDINATOR
    {"fusion", "a ResNet-50 step's gradients through the coordinator, fused and not",
     kolo::bench::run_fusion_bench},
    {"latency", "a 4-byte allreduce through the coordinator and the rate of tiny tensors",
     kolo::bench::run_latency_bench},
    {"autotune", "sweep of fusion x cycle x bucket on ResNet-50, then the autotuner",
     kolo::bench::run_autotune_bench},
    {"elastic", "elastic::State's commit, restore and sync for the example models and ResNet-50",
     kolo::bench::run_elastic_bench},
    {"zero", "ZeRO stages 1 and 2 against unsharded: step time and memory per rank",
     kolo::bench::run_zero_bench},
#endif
};

std::string tool_help() {
  std::string out = "usage: kolo-bench <command> [options]\ncommands:\n";
  for (const Subcommand& c : kCommands) {
    std::string name(c.name);
    out += "  " + name + std::string(name.size() < 15 ? 15 - name.size() : 1, ' ') +
           std::string(c.summary) + "\n";
  }
  return out +
         "Every command takes --json FILE (its rows as JSON, written by rank 0) and --help.\n"
         "Run `kolo-bench <command> --help` for its options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(tool_help().c_str(), stderr);
    return 2;
  }
  const std::string_view command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(tool_help().c_str(), stdout);
    return 0;
  }
  for (const Subcommand& c : kCommands) {
    if (c.name != command) continue;
    kolo::Result<kolo::KnobSet> knobs = kolo::KnobSet::from_process_env();
    if (!knobs.ok()) {
      std::fprintf(stderr, "kolo-bench: %s\n", knobs.status().message().c_str());
      return 2;
    }
    return c.main(*knobs, argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kolo-bench: unknown command '%s'\n%s", argv[1], tool_help().c_str());
  return 2;
}
