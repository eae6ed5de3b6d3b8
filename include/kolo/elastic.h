// Elastic training (docs/elastic.md): a job that goes on when a rank is lost or added.
//
// A State names what a rank needs to continue, in the caller's memory (tensors, byte strings,
// counters); commit() snapshots it in host memory, restore() rolls it back to the last commit,
// sync() makes every rank equal to the rank with the newest commit. run(state, fn) calls fn and,
// when the world changes under it (a rank lost, ranks added by kolorun), re-forms the world
// without restarting this process, restores and syncs the State, and calls fn again:
//
//   kolo::elastic::State state;
//   KOLO_RETURN_IF_ERROR(state.add_tensor("fc1.weight", kolo::view_of(w.data(), {512, 784})));
//   KOLO_RETURN_IF_ERROR(state.add_counter("step", &step));
//   KOLO_RETURN_IF_ERROR(kolo::elastic::run(state, [&]() -> kolo::Status {
//     while (step < steps) {
//       KOLO_RETURN_IF_ERROR(train_one_step());        // a lost rank: PeerFailure
//       if (++step % 10 == 0) KOLO_RETURN_IF_ERROR(state.commit());  // ranks added: WorldChanged
//     }
//     return kolo::Status::Ok();
//   }));
//
// A job is elastic when kolorun starts it so (`kolorun -np 4 --min-np 2 --max-np 6 ...`): each
// process is then a worker whose rank belongs to a generation of the world (Note [Elastic
// rendezvous] in rendezvous/elastic_plan.h). Elsewhere run() calls fn once and the State works
// as in a fixed job.
//
// Contract shared by the members:
// - Ownership. The State borrows what is registered: the caller keeps each tensor's memory, byte
//   string and counter alive, at the same address, for the State's lifetime. The snapshot is
//   the State's own host memory (one buffer for the tensors and counters, allocated by the
//   first commit or sync, and a copy of each byte string).
// - Thread-safety. Every member may be called from any thread; calls on one State are
//   serialised by its lock. commit() reads and restore()/sync() write the registered memory:
//   nothing else may write it meanwhile (as with a Handle's view).
// - Collectives. sync() and the first commit() are collective: every rank of the job calls
//   them, in the same order as its other collectives, and every rank registers the same keys
//   with the same kinds, dtypes and shapes (byte strings may differ in length). They run on the
//   global process set under the names "elastic.<name>.*". Later commits and restore() are
//   local copies; in an elastic job each commit() also asks, collectively, whether the launcher
//   has a newer world waiting (check_world()). After the world changes, sync() runs before the
//   next commit(): run() does this.
// - Errors. Status, never an exception. A failed call changes neither the snapshot nor the
//   registered memory (sync() receives into a buffer of its own and writes back only once
//   every transfer succeeded), so restore() after a failure still returns the last commit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kolo/status.h"
#include "kolo/tensor.h"

// State's first declaration fixes its visibility: exported, as the class below.
#pragma GCC visibility push(default)
namespace kolo::elastic {
class State;
}
#pragma GCC visibility pop

namespace kolo::elastic::detail {
class StateImpl;  // defined in elastic/state.cc; not exported
// run()'s: the State's on_reset callbacks, in order, up to the first error.
Status call_reset_callbacks(State& state);
}  // namespace kolo::elastic::detail

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo::elastic {

class State {
 public:
  // `name` tells the collectives of several States of one job apart: every rank gives a State
  // the same name, and States whose collective calls may overlap need different names.
  // Registration is open until the first commit() or sync().
  explicit State(std::string name = "state");
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // Registration. Keys are unique across the three kinds, non-empty, and compared across ranks
  // by the first collective call. Errors: InvalidArgument naming the key (empty, already
  // registered, a null pointer, a view with a negative dimension or null data and elements);
  // Unsupported naming the key and device for a view that is not on the CPU; PreconditionFailed
  // naming the key after the first commit() or sync() (the layout is fixed then, so that later
  // commits need no communication).
  //
  // A dense CPU tensor: commit() copies its bytes, restore() and sync() write them back.
  Status add_tensor(std::string key, TensorView tensor);
  // A byte string whose length may change between commits (a sampler's or RNG's serialised
  // state); restore() and sync() assign the committed string to it.
  Status add_bytes(std::string key, std::string* bytes);
  // A counter (epoch, step, the sampler's position).
  Status add_counter(std::string key, int64_t* counter);

  // Snapshots every registered entry in host memory, replacing the previous snapshot: a copy of
  // the registered bytes (docs/elastic.md gives its cost). The first commit also checks, with one
  // allgather, that every rank registered the same keys, kinds, dtypes and shapes. In an elastic
  // job it then calls check_world(): WorldChanged on every rank, with the snapshot taken, when
  // the launcher has ranks to add (run() re-forms the world and calls fn again).
  // Errors: PreconditionFailed before kolo::init(); Mismatch naming the first key that differs,
  // what each rank registered and which ranks (alike on every rank; nothing is committed,
  // registration stays open); the collectives' errors; WorldChanged as above.
  Status commit();

  // Writes the last commit back into the registered memory. Local. Errors: PreconditionFailed
  // when this State holds no commit.
  Status restore();

  // Makes every rank equal to the rank with the newest commit (the most commits; the lowest
  // such rank): every rank's snapshot and registered memory become that rank's last commit,
  // that rank's own memory included (rolled back to its commit), and commits() becomes its
  // count. Ranks that never committed take it whole. When no rank has committed, rank 0 commits
  // its current values first and every rank takes them (so a sync() at the start is a broadcast
  // of rank 0's values). Checks the registrations as the first commit does, on every call, so
  // that a rank that joins a re-formed world is checked too. Cost: one allgather of the
  // registrations, one broadcast of the tensors and counters, one broadcast_object of the byte
  // strings. Errors: PreconditionFailed before kolo::init(); Mismatch as commit(); the
  // collectives' errors (a lost peer: PeerFailure).
  Status sync();

  // How many commits the snapshot stands for: 0 before the first; sync() adopts the newest
  // rank's count.
  int64_t commits() const;

  // Called by run() on every rank after each re-forming of the world, once the State is synced
  // and before fn is called again, in the order added: what depends on the world's size (a
  // learning rate scaled by it, a sampler's shard) is rebuilt here. A callback's error ends
  // run() with it.
  void on_reset(std::function<Status()> callback);

 private:
  friend Status detail::call_reset_callbacks(State& state);
  std::unique_ptr<detail::StateImpl> impl_;
};

// Whether this process is a worker of an elastic job (kolorun set KOLO_ELASTIC_WORKER).
bool enabled();

// The generation of the world this rank is in (0 the first, counted by kolorun); -1 when the
// job is not elastic or Kolo is not initialised.
int64_t generation();

// Collective over the global process set, every rank alike: WorldChanged on every rank when the
// launcher has published a newer world (ranks to add) than this rank's, else Ok. Rank 0 reads
// one store key and broadcasts it: cheap, but a round trip (docs/elastic.md). Not elastic: Ok
// without communication. State::commit() calls it; a loop without a State may too.
Status check_world();

// Whether run() answers `st` (fn's failure) by re-forming the world: WorldChanged, PeerFailure,
// and any failure once this rank's Kolo has stopped because its world broke. Other failures (a
// bad argument, ranks that disagree) end run() with them.
bool is_world_change(const Status& st);

// Leaves the current world and joins the next one: kolo::shutdown(), then kolo::init(), which
// waits (KOLO_RENDEZVOUS_TIMEOUT) for the newest generation that names this worker, asking
// kolorun for a new one when the world broke and none is newer. Errors: PreconditionFailed when
// the job is not elastic; PeerFailure with kolorun's message when the job cannot go on (fewer
// ranks than --min-np, Aborted with kolorun's message); init()'s errors.
Status reform();

// KOLO_ELASTIC_RESET_LIMIT as the last kolo::init() read it (its default before).
int reset_limit();

struct RunOptions {
  // How many times run() re-forms the world before it gives up and returns the failure;
  // negative: KOLO_ELASTIC_RESET_LIMIT.
  int reset_limit = -1;
};

// Syncs `state` (every rank, a joining one included, starts from the newest commit), runs its
// on_reset callbacks when this worker joined a re-formed world (generation() > 0), then calls
// fn. When fn fails with a world change (is_world_change) in an elastic job: reform(), then
// state.sync() (which rolls every rank, this one included, back to the newest commit: the
// restore), then the State's on_reset callbacks, then fn again, up to the reset limit.
// Returns fn's Ok, fn's other failures as they are, or the failure that ended the job, its
// context saying how many times the world was re-formed. Not elastic: one call of fn after the
// sync. Call it after kolo::init(), on every rank, with the same State.
Status run(State& state, const std::function<Status()>& fn, const RunOptions& options = {});

}  // namespace kolo::elastic
#pragma GCC visibility pop
