// FailureWatch: spreads a rank failure across nodes. When a rank fails, its node's kolorun
// publishes "node K: <what happened>" under kolorun/abort in the store; every other node's
// watch thread sees the key and makes fd() readable (the message can be read from it), and
// that node's supervisor then stops its ranks too. Without this, the surviving nodes' ranks
// would wait for their dead peer until a backend timeout.
// A lost store (node 0's kolorun has exited) ends the watch quietly: there is nobody left to
// hear from. Thread-safe; the destructor stops and joins the threads.
//
// Nothing here blocks its caller on the store: publish() hands the report to a thread of its
// own, because the supervisor calls it from the loop that must keep forwarding signals and
// reaping ranks while the store may be unreachable (node 0 gone, a partition). How long that
// thread may then take is the store client's business: kolorun gives the watch a client with
// short connect and I/O bounds (job.h), so that the destructor's join is short too.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "rendezvous/store.h"

namespace kolo::kolorun {

class FailureWatch {
 public:
  // store must outlive this object.
  FailureWatch(Store& store, int node_rank);
  ~FailureWatch();
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

  // Readable once another node reported a failure; reading yields its message.
  int fd() const { return pipe_[0]; }
  // Tells the other nodes that this node failed (first report wins; later ones are dropped).
  // Returns at once; the report is sent from a thread (not at all once the store is lost).
  // Call at most once.
  void publish(const std::string& what);
  // Whether a store call failed other than by timing out: node 0's kolorun is gone or cannot
  // be reached, so nothing more is to be said to it.
  bool store_lost() const { return store_lost_; }

 private:
  void run();
  void send_report(const std::string& what);

  Store& store_;
  const int node_rank_;
  int pipe_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<bool> store_lost_{false};
  std::thread thread_;
  std::thread reporter_;  // started by publish()
};

}  // namespace kolo::kolorun
