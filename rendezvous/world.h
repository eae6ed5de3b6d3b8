// World: who this process is in the job (rank, size, node-local and cross-node coordinates),
// the rendezvous store every backend bootstraps from, and the job's shared secret.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/knobs.h"
#include "kolo/status.h"
#include "rendezvous/barrier.h"
#include "rendezvous/store.h"
#include "rendezvous/tcp_store.h"

namespace kolo {

struct World {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  std::unique_ptr<Store> store;
  std::string secret;
  std::unique_ptr<TcpStoreServer> server;  // when this process hosts the store
};

// True when `knobs` has KOLO_RANK set: this process was started by kolorun (or as if).
bool launched_by_kolorun(const KnobSet& knobs);

// The world that kolorun describes with the launcher-set knobs of `knobs` (the KnobSet that
// kolo::init() parsed from the environment; nothing here reads the environment again):
//   KOLO_RANK, KOLO_SIZE               required together; 0 <= rank < size
//   KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE   default rank, size (one node); 0 <= local_rank < local_size
//   KOLO_CROSS_RANK, KOLO_CROSS_SIZE   default 0, 1;                  0 <= cross_rank < cross_size
//   KOLO_STORE_ADDR                    HOST:PORT of the store server; required when size > 1
//   KOLO_SECRET                        the job secret; required (non-empty) when size > 1
// Without KOLO_RANK (and with none of the others set) it returns a 1-rank world whose store is
// an in-process MemoryStore and whose secret is random. With KOLO_STORE_ADDR it connects a
// TcpStore (waiting up to 30 s for the server).
// Errors: InvalidArgument naming the variable, its value and the accepted form, e.g.
//   "KOLO_RANK=4 is invalid: expected an integer in [0, KOLO_SIZE=4)"; IoError from connecting.
Result<World> world_from_knobs(const KnobSet& knobs);

// The store key under which kolorun records how rank `rank`'s process ended, once it has reaped
// it: "exited with status 1", "was killed by signal 9 (SIGKILL)". Its peers wait for it to say
// what happened to a rank that left (Note [Departures] in coordinator/departures.h).
std::string launcher_exit_key(int rank);

// 32 lowercase hex digits from std::random_device (128 bits): a job secret.
std::string random_secret();

}  // namespace kolo
