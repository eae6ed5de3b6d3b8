// An elastic job on several nodes: how node 0's kolorun (the driver's, elastic_driver.h) and the
// kolorun of every other node talk through the job's store. The ranks' protocol (Note [Elastic
// rendezvous] in rendezvous/elastic_plan.h) is unchanged: only kolorun's side spreads out.
//
// Note [Elastic nodes]
// Roles. Every node runs its own kolorun with the same --nnodes, -np, --min-np and --max-np
// (gather_nodes in job.cc refuses a node whose flags differ, naming them). Node 0 serves the
// store and runs the driver: it alone decides the generations and allocates worker ids, so ids
// stay unique job-wide. Every node starts, supervises and reaps only its own workers.
// Node names. A plan names each worker's host so that make_plan groups ranks by node. A node's
// name is its hostname, or "<hostname>/node<K>" when an earlier node of the job has that
// hostname already (two kolorun on one machine, or network namespaces, which share it): ranks
// of different kolorun must never be counted as one host's (local_size, shm).
// Keys, all under kolorun/elastic/ (a node K > 0 is "the node", node 0 "the driver"):
//   node/<K>/beat          counter the node raises every kBeatEvery: it lives;
//   node/<K>/orders        counter of orders; node/<K>/order/<i> "start <W>" or "stop <W>",
//                          written by the driver before it raises the counter, read in order;
//   node/<K>/events        counter of events; node/<K>/event/<i> "exit <W> <clean> <stopped>
//                          <how>", written by the node before it raises the counter;
//   node/<K>/lost          the driver gave the node up (its text says why): the node stops its
//                          workers and exits 1;
//   node/<K>/done          the node's kolorun is leaving;
//   late, late/<i>         a node that joins a running job (--node-rank >= --nnodes) raises
//                          `late` and writes its node rank and -np under late/<i-1>;
//   over                   node 0's exit status, once its supervision ended: the job is over.
// Every node also records its workers' ends under exit_key(worker) for the ranks, as one node
// does (exit_notices.h).
// Liveness. A node whose beat has not moved for kNodeLossBound is lost with its kolorun:
// SIGKILL, a dead host, a cut link. Its workers die with their kolorun (PR_SET_PDEATHSIG) or are
// cut off; the driver counts each as failed, "lost with node K (host H)" (also under its
// exit_key), writes node/<K>/lost and forms the next generation from the others, or ends the job
// below --min-np. Node 0 lost takes the store with it: every other node's store calls fail
// within kolorun's store bound (job.cc), and its kolorun stops its workers and exits 1 saying so.
// Joining. Initial nodes get generation 0's workers by start orders. A node started later
// registers under `late`; the driver gives it up to its -np workers (within --max-np) as new
// workers, which join at the running ranks' next commit like workers of new slots. With
// --host-discovery-script (run on node 0 only) every node follows instead the slots of the line
// naming it (node_targets()): a node registers, then waits until its host is listed.
// Ending. Node 0 writes `over` once its own supervision ended (the job finished or ended), then
// waits, bounded, for the live nodes' `done` before it stops serving the store.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "rendezvous/store.h"
#include "tools/kolorun/host_discovery.h"

namespace kolo::kolorun {

// How often a node raises its beat.
inline constexpr std::chrono::milliseconds kBeatEvery{100};
// A node whose beat stood still this long is lost. A kolorun turns its loop every 10 ms and
// beats every 100 ms, so 15 missed beats mean it is dead or cut off, not busy; yet the
// survivors of a lost host train again within about two seconds. It stays below kolorun's store
// bound (job.cc), so a node whose store calls stall is given up before it gives up on itself.
inline constexpr std::chrono::milliseconds kNodeLossBound{1500};

std::string node_host_key(int node);  // "kolorun/node/<K>/host", as gather_nodes writes it
inline constexpr const char* kOverKey = "kolorun/elastic/over";

struct NodeOrder {
  bool start = true;  // start the worker; false: stop it (SIGTERM, then SIGKILL)
  int64_t worker = 0;
};

struct NodeEvent {
  int64_t worker = 0;
  bool clean = false;    // exited 0
  bool stopped = false;  // its kolorun stopped it (an order, the job's end)
  std::string how;       // exit_text()
};

// Node 0's view of the other nodes. Not thread-safe (the supervision loop's); the store must
// outlive it. Every call makes store round trips; errors are the store's.
class NodeRoster {
 public:
  using Clock = std::chrono::steady_clock;
  struct Node {
    std::string host;  // its hostname
    std::string name;  // its name in plans (Note [Elastic nodes])
    int np = 0;        // the workers it offers (-np)
    bool lost = false;
    Clock::time_point beat_seen;
    int64_t beat = -1, orders = 0, events = 0;
  };
  struct News {
    std::vector<std::pair<int, NodeEvent>> exits;  // (node, event), in the node's order
    std::vector<int> joined;                       // late nodes that registered
    std::vector<int> lost;                         // nodes whose beat stopped
    std::vector<int> left;  // nodes whose beat stopped after their kolorun wrote `done`
  };

  NodeRoster(Store& store, std::string node0_host, int np);
  // Adds the initial nodes 1..nnodes-1, reading their hostnames (gather_nodes wrote them).
  Status add_initial(int nnodes, int np, Clock::time_point now);
  // Reads registrations, events and (every kBeatEvery) beats. A node found lost is marked lost
  // here and named in News::lost once (News::left when its kolorun said it was leaving: an
  // interrupted node); its later events are ignored.
  Result<News> poll(Clock::time_point now);
  Status order(int node, NodeOrder order);
  // Writes node/<K>/lost with `why`.
  Status give_up(int node, const std::string& why);
  const std::map<int, Node>& nodes() const { return nodes_; }
  const std::string& name_of(int node) const;
  // Node 0's end: writes `over`, then waits until every node not lost wrote `done`, at most
  // `bound`. Timeout naming the nodes that did not.
  Status finish(int code, std::chrono::milliseconds bound);

 private:
  Status poll_late(Clock::time_point now, News& news);
  std::string unique_name(const std::string& host, int node) const;

  Store& store_;
  std::map<int, Node> nodes_;  // 0 included
  int64_t late_seen_ = 0;
  Clock::time_point last_beats_{};
};

// What a discovered list (--host-discovery-script on node 0) asks of each node: node 0 gets the
// slots of the lines that mean its host (local_share: localhost, 127.0.0.1, its hostname), any
// other node those of the line naming it as plans do (its hostname, or "<hostname>/node<K>"),
// 0 when none does; filled in node-rank order up to max_np in all. Lost nodes get nothing.
// `unclaimed`: hosts listed with slots where no kolorun of the job runs (yet).
struct NodeTargets {
  std::map<int, int> workers;  // node -> workers
  int total = 0;               // the sum of workers
  int listed = 0;              // the slots of the nodes' lines before the max_np cap
  std::vector<std::string> unclaimed;
};
NodeTargets node_targets(const std::vector<HostSlots>& hosts,
                         const std::map<int, NodeRoster::Node>& nodes, int max_np);

// A node's side (node rank > 0). Not thread-safe; the store must outlive it. Errors are the
// store's: node 0 gone.
class NodeLink {
 public:
  NodeLink(Store& store, int node);
  // A node that joins a running job: registers under `late` offering `np` workers.
  Status register_late(int np);
  // Raises the beat when kBeatEvery has passed since the last.
  Status beat(std::chrono::steady_clock::time_point now);
  // The orders written since the last call, in order.
  Result<std::vector<NodeOrder>> take_orders();
  Status report(const NodeEvent& event);
  // The driver's word, read together every kBeatEvery: lost (why), over (node 0's exit status).
  struct Word {
    std::optional<std::string> lost;
    std::optional<int> over;
    std::optional<std::string> end;  // kEndKey: the job ended, and why
  };
  Result<Word> read_word();
  // Best effort: node 0 may be gone.
  void done();

 private:
  Store& store_;
  const int node_;
  int64_t orders_seen_ = 0, events_ = 0;
  std::chrono::steady_clock::time_point last_beat_{};
};

}  // namespace kolo::kolorun
