// World: who this process is in the job (rank, size, node-local and cross-node coordinates),
// the rendezvous store every backend bootstraps from, and the job's shared secret.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

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
  // An elastic worker's world (Note [Elastic rendezvous] in elastic_plan.h): its generation and
  // the worker id of each rank; -1 and empty in a fixed job.
  int64_t generation = -1;
  std::vector<int64_t> workers;
};

// True when `knobs` has KOLO_RANK or KOLO_ELASTIC_WORKER set: this process was started by
// kolorun (or as if).
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
// TcpStore, waiting for the server and then for each reply up to rendezvous_timeout(knobs); the
// IoError then names KOLO_RENDEZVOUS_TIMEOUT and kolorun's --timeout, which set it.
// An elastic worker (KOLO_ELASTIC_WORKER instead of KOLO_RANK; KOLO_STORE_ADDR and KOLO_SECRET
// required) joins the newest generation after `last_generation` that names it (join_generation
// in elastic_world.h) and takes its coordinates from that plan; its store is a GenerationWatch.
// Errors: InvalidArgument naming the variable, its value and the accepted form, e.g.
//   "KOLO_RANK=4 is invalid: expected an integer in [0, KOLO_SIZE=4)"; IoError from connecting;
//   join_generation's.
Result<World> world_from_knobs(const KnobSet& knobs, int64_t last_generation = -1);

// KOLO_RENDEZVOUS_TIMEOUT in whole milliseconds, rounded up (the registry's minimum is 1 ms): the
// bound of every wait of the rendezvous (the store connect, the knob agreement, every backend's
// connect through BackendContext::connect_timeout). kolorun's --timeout sets it for its ranks.
std::chrono::milliseconds rendezvous_timeout(const KnobSet& knobs);

// `st` with what bounded the wait that failed appended, for a Timeout or IoError of the
// rendezvous: "...; KOLO_RENDEZVOUS_TIMEOUT=3s bounds each wait of the rendezvous (kolorun
// --timeout DUR sets it)". Other statuses pass unchanged.
Status with_rendezvous_timeout_hint(const Status& st, const KnobSet& knobs);

// The store key under which kolorun records how rank `rank`'s process ended, once it has reaped
// it: "exited with status 1", "was killed by signal 9 (SIGKILL)". Its peers wait for it to say
// what happened to a rank that left (Note [Departures] in coordinator/departures.h).
std::string launcher_exit_key(int rank);

// The job secret in the file at `path`, trailing whitespace (the newline of `echo S > file`)
// removed. `what` names where the path came from in errors ("--secret-file",
// "KOLO_SECRET_FILE"). Errors: InvalidArgument "<what> PATH has mode 0644: other users may read
// it; make it private with chmod 600 PATH" when its group or others have any permission (a
// readable secret leaks as surely as one on the command line); the stat error; an empty file.
Result<std::string> read_secret_file(const std::string& path, const std::string& what);

// 32 lowercase hex digits from std::random_device (128 bits): a job secret.
std::string random_secret();

}  // namespace kolo
