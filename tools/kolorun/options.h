// kolorun's command line: `kolorun [options] -np N cmd args...`. Parsing is separate from
// launching so that every rejected flag is unit-tested without starting processes.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/knobs.h"
#include "kolo/status.h"
#include "rendezvous/address.h"
#include "tools/kolorun/cpu_binding.h"

namespace kolo::kolorun {

// --print-config: the knobs' values and sources, or (=markdown) README's configuration table.
enum class PrintConfig { kNo, kValues, kMarkdown };

// An elastic job (issue 27; Note [Elastic rendezvous] in rendezvous/elastic_plan.h): a worker
// that fails no longer stops the others while at least min_np remain. Defaults written here once.
struct ElasticOptions {
  int min_np = 0;        // --min-np: fewer live workers end the job (default -np)
  int max_np = 0;        // --max-np: never more live workers than this (default -np)
  bool respawn = false;  // --respawn: a failed worker is replaced on its host
  std::optional<std::string> discovery_script;         // --host-discovery-script PATH
  std::chrono::milliseconds discovery_interval{1000};  // --discovery-interval DUR
  std::chrono::milliseconds discovery_timeout{10000};  // --discovery-timeout DUR: then killed
  int blacklist_after = 3;  // --blacklist-after K: failed workers before a host gets no more
};

struct LaunchOptions {
  int np = 0;                    // processes on this node (required, >= 1)
  int np_total = 0;              // --np-total: processes in the job (0: not given); sets np
  int nnodes = 1;                // nodes in the job
  int node_rank = 0;             // this node, in [0, nnodes)
  std::optional<HostPort> rdzv;  // store address; required when nnodes > 1
  std::chrono::milliseconds grace{3000};   // SIGTERM -> SIGKILL delay when stopping ranks
  std::optional<std::string> secret;       // --secret (KOLO_SECRET is consulted later)
  std::optional<std::string> secret_file;  // --secret-file PATH (read by setup_job)
  bool tag_output = true;
  BindTo bind_to = BindTo::kAuto;          // --bind-to (cpu_binding.h)
  std::map<std::string, std::string> env;  // -x VAR=VALUE
  // KOLO_* name -> value, from the knob flags; --timeout is KOLO_RENDEZVOUS_TIMEOUT's, so that
  // the ranks' waits follow the bound the user gave kolorun's (rendezvous_timeout()).
  std::map<std::string, std::string> knob_flags;
  // Set when any elastic flag is given (--min-np, --max-np, --respawn, --host-discovery-script,
  // --discovery-interval, --discovery-timeout, --blacklist-after). On several nodes its bounds
  // count the whole job (Note [Elastic nodes] in elastic_nodes.h).
  std::optional<ElasticOptions> elastic;
  std::vector<std::string> command;  // cmd args...
  bool help = false;
  PrintConfig print_config = PrintConfig::kNo;
};

// Parses argv[1..]. InvalidArgument naming the flag, the value and the accepted form. -np counts
// one node's processes; --np-total N instead counts the job's, and sets np to N / nnodes
// (InvalidArgument naming both numbers when they do not divide; also when -np is given too).
// With --help or --print-config, -np and the command are not required.
// Elastic flags: InvalidArgument for --min-np 0 or above -np (x --nnodes), --max-np below it, a
// zero --discovery-interval or --discovery-timeout, and --blacklist-after 0. With an elastic flag,
// --node-rank may be --nnodes or more: a node that joins a running job later.
Result<LaunchOptions> parse_options(const std::vector<std::string>& args);

// Every knob as the ranks will see it: kolorun's own KOLO_* environment, then -x, then the knob
// flags (common/knobs.h). Errors: KnobSet::read's, naming the variable or the flag; kolorun
// reports them before it starts anything.
Result<KnobSet> knobs_for_ranks(const LaunchOptions& options);

// The --help text.
std::string usage();

}  // namespace kolo::kolorun
