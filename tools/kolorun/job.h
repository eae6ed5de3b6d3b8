// Job setup: the part of kolorun between parsing flags and starting processes. It hosts or
// joins the rendezvous store, gathers the nodes (multi-node), settles the secret and builds
// each local rank's environment.
#pragma once

#include <memory>
#include <vector>

#include "kolo/status.h"
#include "rendezvous/tcp_store.h"
#include "tools/kolorun/exit_notices.h"
#include "tools/kolorun/failure_watch.h"
#include "tools/kolorun/options.h"
#include "tools/kolorun/supervisor.h"

namespace kolo::kolorun {

struct Job {
  std::unique_ptr<TcpStoreServer> server;  // on node 0 (or a single node): keep it alive
  std::unique_ptr<TcpStore> store;         // kolorun's own client, with short bounds
  std::unique_ptr<ExitNotices> exits;      // how each rank of this node ended, for its peers
  std::vector<RankSpec> ranks;             // this node's processes (none when elastic)
  // Elastic: what every worker runs, its environment without KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_*
  // and KOLO_CROSS_* (a worker's rank is its generation's); the supervisor adds
  // KOLO_ELASTIC_WORKER.
  RankSpec worker;
  std::unique_ptr<FailureWatch> watch;  // multi-node: failures between nodes
  // --timeout (KOLO_RENDEZVOUS_TIMEOUT, rendezvous_timeout()): the nodes' gathering at start and
  // node 0's wait for the others to finish. Each rank reads the same knob for its own waits.
  std::chrono::milliseconds timeout{0};
};

// Single node without --rdzv: serves the store on 127.0.0.1 at an ephemeral port.
// Otherwise node 0 serves at --rdzv and every node connects there, checks that all nodes were
// started with the same --nnodes and -np (elastic: and --min-np and --max-np; Mismatch naming
// them), and waits (--timeout) until every node rank has arrived (--timeout); the Timeout error
// names the node ranks that never did. An elastic node that joins later (--node-rank >= --nnodes)
// does not wait. Multi-node fixed jobs also get a FailureWatch, so a failure on any node stops
// the ranks on every node; elastic ones none (Note [Elastic nodes] in elastic_nodes.h). Every job
// gets ExitNotices (Note [Departures] in coordinator/departures.h).
// Secret: --secret-file (refused unless private to its owner: mode 600 or stricter), else
// --secret (with a warning: it shows in the process list), else KOLO_SECRET (from `knobs`),
// else (one node only) random 128-bit hex.
// Each rank's environment is this process's environment, then options.env (-x), then the knob
// flags, then the KOLO_* world variables. `knobs` is knobs_for_ranks(options), already checked.
// Elastic (options.elastic): no ranks; `worker` instead, with KOLO_STORE_ADDR and KOLO_SECRET and
// no world coordinates (those of kolorun's own environment removed too), unbound, with
// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS defaulting to an equal share of the CPUs for --max-np.
Result<Job> setup_job(const LaunchOptions& options, const KnobSet& knobs);

// After this node's ranks have exited (`failed`: the job did not succeed). Multi-node: marks
// this node done; node 0 then keeps serving the store until every node is done, because ranks
// elsewhere may still use it: at most --timeout after a success, a few seconds past the grace
// period after a failure. Once the ranks run, kolorun's store client gives up on an unreachable
// store within seconds, so a lost node 0 costs no more. Returns the Timeout naming the nodes
// that never finished, for a warning.
Status finish_job(Job& job, const LaunchOptions& options, bool failed);

}  // namespace kolo::kolorun
