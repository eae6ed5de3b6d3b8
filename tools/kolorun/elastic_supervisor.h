// supervise_elastic(): kolorun's supervision of an elastic job (kolorun --min-np/--max-np/
// --respawn/--host-discovery-script). The processes are supervised as in a fixed job (Note
// [kolorun supervision]: own process groups, prefixed output, forwarded signals, Note [Ranks die
// with kolorun]), but a worker that fails does not stop the others: the ElasticDriver
// (elastic_driver.h, Note [kolorun's generations]) forms the next generation of the world from
// those that live, and kolorun starts replacements (--respawn) and workers for new slots
// (--host-discovery-script).
//
// Note [Elastic supervision loop]
// Survivors should train again within a second of a kill, so the loop notices events fast: a
// reaped worker at once (SIGCHLD wakes its poll), re-form requests and ready keys within 10 ms
// (the poll's timeout; the driver reads the store every turn, one round trip per key, to the
// local store server). In each turn: reap (record the exit under exit_key, tell the driver,
// start a replacement), apply the newest discovery result, let the driver decide, then act on
// its decision: say each new generation, stop the workers left over once the job finished, and
// once the job has ended (fewer than --min-np, or kolorun interrupted) give the workers the
// grace period to leave by themselves (every wait of theirs ends with kolorun's message), then
// SIGTERM, then SIGKILL after another grace period.
// A worker kolorun stops itself (slots shrank, the job finished or ended) is not a failure: it
// neither counts against its host's blacklist nor is replaced.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "kolo/status.h"
#include "rendezvous/store.h"
#include "tools/kolorun/host_discovery.h"
#include "tools/kolorun/options.h"
#include "tools/kolorun/supervisor.h"

namespace kolo::kolorun {

struct ElasticSuperviseOptions {
  bool tag_output = true;
  std::chrono::milliseconds grace{3000};
  ElasticOptions elastic;
  int initial_workers = 1;  // workers 0..initial_workers-1, generation 0's members
  // Every worker's command and environment (without KOLO_RANK and the other coordinates);
  // KOLO_ELASTIC_WORKER is added per worker. `rank` and `cpus` are ignored.
  RankSpec worker;
  std::string host;  // this host's name in the plans
  // Where the plans and keys of Note [Elastic rendezvous] live; must outlive the call.
  Store* store = nullptr;
  // Discovery after the first run (which kolorun made itself, before starting anything);
  // nullptr without --host-discovery-script. Must outlive the call.
  HostDiscovery* discovery = nullptr;
  bool warned_other_hosts = false;  // kolorun's first run warned about hosts it cannot use
  // Called for every worker once reaped: its id and exit_text(). kolorun records it under
  // elastic_protocol::exit_key(worker) (exit_notices.h).
  std::function<void(int64_t worker, const std::string& how)> on_exit;
  // Several nodes (Note [Elastic nodes] in elastic_nodes.h): on node 0 (node_rank 0 and
  // several_nodes) kolorun drives the other nodes' kolorun too, and generation 0 has
  // initial_workers on each of the nnodes initial nodes; on any other node it starts only the
  // workers node 0 orders, and initial_workers is what it offers as a late node (node_rank >=
  // nnodes).
  bool several_nodes = false;
  int nnodes = 1;
  int node_rank = 0;
};

// Runs the job until no worker is left (several nodes: on node 0, none on any node; elsewhere,
// until node 0 says the job is over, gives this node up, or is lost) and returns kolorun's exit
// status: 0 when every member of the last generation exited 0 (elsewhere: node 0's status); 1 when
// the job ended otherwise (fewer than --min-np workers: the driver's message is printed; kolorun's
// store lost); 128 + signal when kolorun was interrupted. IoError "cannot start worker W: ..." when
// one of the first workers cannot start (those already started are stopped first); a later worker
// that cannot start is reported and counts as failed. Call once per process, on the thread that
// lives as long as kolorun: it installs signal handlers.
Result<int> supervise_elastic(const ElasticSuperviseOptions& options);

}  // namespace kolo::kolorun
