// PairTable: the point-to-point pairs of one rank (kolo::send_async / recv_async). A pair is a
// hidden process set of two ranks: a Runtime of its own over backends that connect only the
// two, created by the two alone when they first send to or receive from each other, never
// collectively over the job (Note [Point-to-point] in docs/architecture.md).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/thread_annotations.h"
#include "coordinator/process_sets.h"
#include "coordinator/runtime.h"
#include "rendezvous/store.h"

namespace kolo::coord {

// A pair's data and control backends on one of its members: pair rank 0 is job rank `low`,
// pair rank 1 job rank `high`. Collective over the two.
using MakePairBackends = std::function<Result<SetBackends>(int low, int high, int pair_rank)>;

// The meeting of two ranks before they connect a pair, through the counter `key` of `store`:
// each rank adds 1 once; the one that sees 2 arrived second, and both then connect. While this
// rank waits, `give_up` is asked every few milliseconds; when it returns an error (this rank
// shuts down, or waited too long), or when `peer_gone_key` appears (the peer's session ended
// without coming), this rank withdraws by adding kWithdrawn. If the peer arrived in between,
// the sum says so and this rank connects after all (the peer is connecting and would hang
// otherwise); if not, a peer arriving later sees the sum and fails.
// Returns OK (connect now), give_up's error, or Aborted naming `peer` as gone.
inline constexpr int64_t kWithdrawn = 1000;
Status meet(Store& store, const std::string& key, const std::string& peer_gone_key, int peer,
            const std::function<Status()>& give_up);

class PairTable {
 public:
  // `global`: the global set's Runtime (this rank, the job's size, the config each pair's
  // Runtime copies without the autotuner, the timeline it records on, on rows
  // "pair <a>-<b>: <tensor>"). `store` (borrowed; must outlive the table) holds the meetings
  // under `prefix`, which must be unique to the session.
  PairTable(std::shared_ptr<Runtime> global, Store* store, std::string prefix,
            MakePairBackends make_backends);
  ~PairTable();  // shutdown()

  // Queues `entry` on the pair of this rank and job rank `peer` (!= this rank): a broadcast
  // whose root is the sender's pair rank. The first operation between the two starts
  // connecting the pair on a thread of its own, and entries wait in order until it is
  // connected, so this never blocks on the peer. Fails the entry when the pair could not be
  // connected (the same error for every later entry) or after shutdown(). Returns its Handle.
  Handle submit(int peer, std::unique_ptr<Entry> entry);

  // Tells every peer that this rank's session is over (a peer waiting to meet it fails instead
  // of waiting; skipped once the job has failed, when the store may be out of reach), stops the
  // connecting threads, fails what waits for a connection and shuts every pair's Runtime down (the
  // peers' pending operations fail, naming this rank). Idempotent.
  void shutdown();

 private:
  struct Pair;
  void connect(int peer, Pair& pair);

  const std::shared_ptr<Runtime> global_;
  Store* const store_;
  const std::string prefix_;
  const MakePairBackends make_backends_;
  const int me_;
  std::atomic<bool> stopping_{false};
  Mutex mu_;
  std::map<int, std::shared_ptr<Pair>> pairs_ KOLO_GUARDED_BY(mu_);  // by the peer's job rank
  bool closed_ KOLO_GUARDED_BY(mu_) = false;
};

// The running session's Runtime and tables (api.cc), or PreconditionFailed naming the
// operation `name` before init() or after shutdown().
struct Session {
  std::shared_ptr<Runtime> global;
  std::shared_ptr<ProcessSetTable> sets;
  std::shared_ptr<PairTable> pairs;
};
Result<Session> current_session(const std::string& name);

}  // namespace kolo::coord
