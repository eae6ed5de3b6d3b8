// Departures: what the other ranks are told when a rank leaves the job without
// kolo::shutdown() (it returned from main or called exit) while they still have work.
//
// Note [Departures]
// A program that leaves without kolo::shutdown() ends its Kolo session in Kolo's static
// destructors (api.cc), which shut the runtime down as kolo::shutdown() does: the negotiation
// tells every rank, and their pending operations fail. Left at that (issue 33),
// - their error said the rank "called shutdown()", which it did not; and
// - they failed before the leaving process had ended. Rank 0 answers the negotiation, so it
//   learns of the shutdown before the leaving rank itself does, and that rank still has its
//   connections to close and the rest of its exit to run. A survivor that throws on the error
//   (uncaught: SIGABRT) was then often dead first, in 3 of 6 runs measured, and kolorun, which
//   names the first rank to end, could not tell cause from consequence.
// So the leaving rank records its departure in the store before its runtime shuts down, and a
// rank with operations to fail because of it first waits, up to kLauncherExitWait, for the
// launcher's record of how that process ended: kolorun writes it once it has reaped the process
// (launcher_exit_key, rendezvous/world.h). Its error then says what happened ("rank 1 exited with
// status 1 before finishing, ..."), and it fails only after kolorun has seen the leaving rank
// end, so that the first exit kolorun sees is the cause's (Note [Which rank kolorun names] in
// tools/kolorun/supervisor.h). Under another launcher (mpirun) nothing is waited for.
// A rank that has nothing to fail (the ranks of a job that ends normally, each leaving without
// kolo::shutdown()) asks nothing and waits for nothing.
//
// Keys: <prefix>/departed/<rank>. Thread-safety: any thread (the Store is thread-safe).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace kolo::coord {

// How long a rank waits for the launcher's record of a departed rank's end. That process ends
// within milliseconds of its session (the rest of its destructors, freeing its memory), and
// kolorun reaps it at once; seconds mean it is stuck in its exit, and the survivors must not
// hang with it.
inline constexpr std::chrono::seconds kLauncherExitWait{5};

class Departures {
 public:
  // `store` is shared with the caller; `prefix` namespaces the keys (the session's, e.g.
  // "kolo/s0"); `launcher_wait`: how long describe() waits for the launcher's record of a
  // rank's end (kLauncherExitWait under kolorun; 0 when the launcher records nothing);
  // `workers`: in an elastic job, the worker id of each rank (World::workers), under which
  // kolorun records a worker's end (elastic_protocol::exit_key); empty in a fixed job.
  Departures(std::shared_ptr<Store> store, std::string prefix, int rank,
             std::chrono::milliseconds launcher_wait, std::vector<int64_t> workers = {});

  // Records that this rank is leaving without kolo::shutdown(). Call before its runtime shuts
  // down. Best effort: when the store cannot be reached (bounded by its client's timeout), the
  // peers' errors say "called shutdown()" as before.
  void record();

  // What happened to `rank`, which shut the session down: nullopt when it recorded no
  // departure (it called kolo::shutdown(), or the store cannot tell). Otherwise, when the
  // launcher's record came within launcher_wait: "rank 1 exited with status 1 before finishing,
  // without calling kolo::shutdown() (it returned from main or called exit)"; else "rank 1
  // exited without calling kolo::shutdown() (it returned from main or called exit) before
  // finishing".
  std::optional<std::string> describe(int rank);

 private:
  std::string key(int rank) const { return prefix_ + "/departed/" + std::to_string(rank); }

  const std::shared_ptr<Store> store_;
  const std::string prefix_;
  const int rank_;
  const std::chrono::milliseconds launcher_wait_;
  const std::vector<int64_t> workers_;
};

}  // namespace kolo::coord
