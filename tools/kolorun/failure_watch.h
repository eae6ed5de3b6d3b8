// FailureWatch: spreads a rank failure across nodes. When a rank fails, its node's kolorun
// publishes "node K: <what happened>" under kolorun/abort in the store; every other node's
// watch thread sees the key and makes fd() readable (the message can be read from it), and
// that node's supervisor then stops its ranks too. Without this, the surviving nodes' ranks
// would wait for their dead peer until a backend timeout.
// A lost store (node 0's kolorun has exited) ends the watch quietly: there is nobody left to
// hear from. Thread-safe; the destructor stops and joins the thread.
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
  void publish(const std::string& what);

 private:
  void run();

  Store& store_;
  const int node_rank_;
  int pipe_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kolo::kolorun
