// Elastic training, part 1: the State a rank needs to continue after the world changes
// (docs/elastic.md). A State names the caller's memory (tensors, byte strings, counters);
// commit() snapshots it in host memory, restore() rolls it back to the last commit, and sync()
// makes every rank equal to the rank with the newest commit.
//
//   kolo::elastic::State state;
//   KOLO_RETURN_IF_ERROR(state.add_tensor("fc1.weight", kolo::view_of(w.data(), {512, 784})));
//   KOLO_RETURN_IF_ERROR(state.add_counter("step", &step));
//   KOLO_RETURN_IF_ERROR(state.sync());  // every rank starts from the same values
//   for (; step < steps; ++step) {
//     train_one_step();
//     if (step % 10 == 0) KOLO_RETURN_IF_ERROR(state.commit());
//   }
//
// What comes next (issue 27, items 2-3): kolo::elastic::run(state, fn) re-forms the world when a
// rank is lost or added, then calls restore() and sync() on this State and calls fn again. A
// State outlives shutdown() and init(): its snapshot is host memory of its own.
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
//   local: no communication. After the world changes (shutdown() and init()), call sync()
//   before the next commit(): a State created on a new rank would otherwise run its first,
//   collective commit alone (run() will do this).
// - Errors. Status, never an exception. A failed call changes neither the snapshot nor the
//   registered memory (sync() receives into a buffer of its own and writes back only once
//   every transfer succeeded), so restore() after a failure still returns the last commit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kolo/status.h"
#include "kolo/tensor.h"

namespace kolo::elastic::detail {
class StateImpl;  // defined in elastic/state.cc; not exported
}

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
  // the registered bytes, no communication (docs/elastic.md gives its cost). The first commit also
  // checks, with one allgather, that every rank registered the same keys, kinds, dtypes and shapes.
  // Errors: PreconditionFailed before kolo::init(); Mismatch naming the first key that differs,
  // what each rank registered and which ranks (alike on every rank; nothing is committed,
  // registration stays open); the allgather's errors.
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

 private:
  std::unique_ptr<detail::StateImpl> impl_;
};

}  // namespace kolo::elastic
#pragma GCC visibility pop
