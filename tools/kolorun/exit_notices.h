// ExitNotices: kolorun's record, in the job's store, of how each of its ranks ended, for the
// ranks still running: under launcher_exit_key(rank) (rendezvous/world.h), or in an elastic job
// elastic_protocol::exit_key(worker), "exited with status 1" or "was killed by signal 9
// (SIGKILL)". A Kolo rank whose peer left without kolo::shutdown()
// waits for it before failing its own operations, so that it fails after kolorun has seen its
// peer end and names what happened to it (Note [Departures] in coordinator/departures.h).
//
// publish() never blocks its caller, the supervise loop, which must keep reaping and forwarding
// signals while the store may be slow or gone: a thread of its own writes the notices in order.
// Thread-safe. The destructor lets the thread write what is queued, each write bounded by the
// store client's I/O timeout (kolorun's is short, job.h), and drops the rest once the store is
// lost.
#pragma once

#include <condition_variable>
#include <deque>
#include <string>
#include <thread>
#include <utility>

#include "common/thread_annotations.h"
#include "rendezvous/store.h"

namespace kolo::kolorun {

class ExitNotices {
 public:
  // store must outlive this object.
  explicit ExitNotices(Store& store);
  ~ExitNotices();
  ExitNotices(const ExitNotices&) = delete;
  ExitNotices& operator=(const ExitNotices&) = delete;

  // Queues the record of one process's end under `key` (launcher_exit_key(rank) or
  // elastic_protocol::exit_key(worker)); `how` is "exited with status 1" or "was killed by
  // signal 9 (SIGKILL)". Dropped once a write has failed (the store is lost).
  void publish(std::string key, std::string how);

 private:
  void run();

  Store& store_;
  Mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<std::string, std::string>> queue_ KOLO_GUARDED_BY(mu_);
  bool closing_ KOLO_GUARDED_BY(mu_) = false;
  bool lost_ KOLO_GUARDED_BY(mu_) = false;  // a write failed: the store is gone
  std::thread thread_;
};

}  // namespace kolo::kolorun
