// FailureBoard: the first failure of a job, shared by its ranks through the rendezvous store, so
// that every survivor's error names the rank that actually failed (issue 15).
//
// Why: a rank names the link it saw break. When rank 2 dies, rank 1 may see that and stop; rank
// 0 may then see rank 1's connection close (or its process end, on shm) before anything of rank
// 2, and would name rank 1, a live rank that merely failed after the real cause. So every rank
// that fails because of a peer (PeerFailure, Timeout, or IoError such as a frame that failed
// its integrity check) first records what it saw under the next number of a store counter, and
// then reports the failure recorded first. A rank records before its connections close (its
// process exits only after the background thread returned the error), so whoever sees its
// link break finds its record already there: the first record is the observation of the
// original fault, and the first cause wins on every rank.
//
// A frozen rank (stopped, or stuck outside Kolo) records nothing and breaks nothing: every
// other rank times out on whichever link it waited on, often a live rank that itself waits on
// the frozen one (recursive doubling, rings). So when the failure is a timeout, a rank waits up
// to a second for every rank's record, and when exactly one rank recorded nothing, that rank is
// named as the one that stopped answering, ahead of the first record.
//
// Keys: <prefix>/failure/count (store add) and <prefix>/failure/<n> (the n-th record, "rank R
// saw: <status>"). The store calls are bounded by the store client's own I/O timeout; api.cc
// gives the board a client of its own with a short one, so that a store that cannot be reached
// (node 0 gone, link down) delays a failing rank by at most about a second; the rank then
// reports what it saw itself.
//
// Thread-safety: name_first_failure() may be called from any thread (the Store is thread-safe).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/thread_annotations.h"
#include "kolo/status.h"
#include "rendezvous/store.h"

namespace kolo::coord {

class FailureBoard {
 public:
  // `store` is shared with the caller (it may be a client of the board's own); `prefix`
  // namespaces the keys (the session's, e.g. "kolo/s0"); `size` is the number of ranks.
  FailureBoard(std::shared_ptr<Store> store, std::string prefix, int rank, int size);

  // Records `observed` (this rank's failure) when it is about a peer (PeerFailure, Timeout,
  // IoError) and returns what this rank should report: `observed` when it is the job's first
  // record or the store cannot tell; otherwise a Status of observed's code that names the first
  // record ahead of what this rank saw: "the job's first failure, as rank 1 saw it: <status>;
  // this rank then saw: <observed message>". When the failure is a timeout (this rank's or the
  // first record) and exactly one other rank recorded nothing within kSettle: "the job's first
  // failure: rank S stopped answering (...); as rank R saw it: ...; this rank then saw: ...".
  // Any other status is returned unchanged.
  // A rank records once: later calls (the executor's and then the background loop's report of
  // one failure) reuse the first answer and do no store I/O.
  Status name_first_failure(const Status& observed);

 private:
  std::string key(const std::string& name) const { return prefix_ + "/failure/" + name; }

  // Returns what name_first_failure returns for the first peer failure, with store I/O.
  Status record_and_name(const Status& observed);
  // The one rank that recorded no failure within kSettle (every rank's record is awaited);
  // nullopt when none or several did, or the store cannot tell.
  std::optional<int> silent_rank();

  const std::shared_ptr<Store> store_;
  const std::string prefix_;
  const int rank_;
  const int size_;
  Mutex mu_;
  bool recorded_ KOLO_GUARDED_BY(mu_) = false;
  Status first_observed_ KOLO_GUARDED_BY(mu_);
  Status answer_ KOLO_GUARDED_BY(mu_);
};

}  // namespace kolo::coord
