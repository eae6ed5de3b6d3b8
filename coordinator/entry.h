// Entry: one operation this rank submitted, from submission until its handle completes.
// Owned by the runtime; after submission only the thread running the cycles touches it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/message.h"
#include "coordinator/op_state.h"
#include "kolo/kolo.h"

namespace kolo::coord {

struct Entry {
  Request request;
  std::vector<TensorView> inputs;   // one per shape of the request
  std::vector<TensorView> outputs;  // allreduce: where results go (== inputs when in place)
  OutputAllocator allocator;        // allgather, alltoall, reducescatter
  std::shared_ptr<detail::OpState> state;
  std::chrono::steady_clock::time_point submitted;
  // The operation on the timeline (Timeline::begin_op at submission, Note [Timeline rows]), 0
  // when the timeline was not recording then; and its span's name, the type's (e.g.
  // "ALLREDUCE") unless the submitter set another: "SEND", "RECV" for point-to-point, which
  // runs as a broadcast.
  uint64_t trace = 0;
  std::string trace_kind;
  // Submitted by a blocking call, whose caller waits on the handle at once and will run the
  // cycle itself when it can (Note [Waiter drives]): the background thread is not woken for it.
  bool caller_waits = false;

  // Negotiation state, the cycle thread's only.
  bool sent_slow = false;                               // already in the coordinator's table
  std::chrono::steady_clock::time_point pending_since;  // when it entered negotiation
  uint64_t seq = 0;  // this rank's submission order: slow-path requests go in this order
};

}  // namespace kolo::coord
