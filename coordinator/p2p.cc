// send_async / recv_async: a broadcast over the pair of the two ranks, rooted at the sender
// (Note [Point-to-point] in docs/architecture.md; coordinator/pairs.h runs the pairs).
#include <algorithm>

#include "coordinator/pairs.h"
#include "coordinator/submit.h"
#include "kolo/kolo.h"

namespace kolo {

namespace {

// The pair's messages say "broadcast 'x'" and know nothing of directions; the caller's say
// what the caller did: "send 'x' to rank 3".
Status relabel(const Status& st, const std::string& name, const std::string& what) {
  if (st.ok()) return st;
  const std::string inner =
      std::string(coord::op_type_name(coord::OpType::kBroadcast)) + " '" + name + "'";
  std::string msg = st.message();
  msg = msg.starts_with(inner) ? what + msg.substr(inner.size()) : what + ": " + msg;
  if (st.code() == StatusCode::kMismatch)
    msg +=
        " (a send meets a recv of the same name on the other rank, with the same dtype and "
        "shape; root is the sending rank)";
  return Status(st.code(), msg);
}

Handle failed(const std::string& name, Status status) {
  auto state = std::make_shared<detail::OpState>(name);
  state->complete(std::move(status));
  return Handle(state);
}

Handle point_to_point(bool send, std::string name, TensorView tensor, int peer,
                      const ProcessSet& set) {
  const char* arg = send ? "dst" : "src";
  std::string what = std::string(send ? "send" : "recv") + " '" + name + "'";
  Result<coord::Session> session = coord::current_session(name);
  if (!session.ok()) return failed(name, session.status());
  // The set's members, once the table has confirmed that the set exists and has this rank.
  if (!set.is_global()) {
    Result<std::shared_ptr<coord::Runtime>> member = session->sets->runtime_for(set, what);
    if (!member.ok()) return failed(name, member.status());
  }
  const std::vector<int> ranks = set.is_global() ? std::vector<int>{} : set.ranks();
  const int me = session->global->topology().rank;
  const int size =
      set.is_global() ? session->global->topology().size : static_cast<int>(ranks.size());
  if (peer < 0 || peer >= size)
    return failed(name, Status::InvalidArgument(
                            what + ": " + arg + " " + std::to_string(peer) + " is not a rank of " +
                            set.to_string() + ", which has ranks 0.." + std::to_string(size - 1)));
  const int peer_rank = set.is_global() ? peer : ranks[peer];
  if (peer_rank == me)
    return failed(name, Status::InvalidArgument(what + ": " + arg + " " + std::to_string(peer) +
                                                " is this rank; a rank cannot " +
                                                (send ? "send to" : "receive from") + " itself"));
  what += (send ? " to rank " : " from rank ") + std::to_string(peer_rank);
  // Pair rank 0 is the lower job rank; the root is the sender.
  const int sender = send ? me : peer_rank;
  const int root = sender == std::min(me, peer_rank) ? 0 : 1;
  Result<std::unique_ptr<coord::Entry>> entry =
      coord::build_broadcast(name, tensor, {.root = root}, /*size=*/2);
  if (!entry.ok()) return failed(name, relabel(entry.status(), name, what));
  (*entry)->trace_kind = send ? "SEND" : "RECV";  // on the pair's rows of the timeline
  // The caller's handle completes with the pair's outcome in the caller's words.
  auto outer = std::make_shared<detail::OpState>(name);
  Handle((*entry)->state).then([outer, name, what](const Status& st) {
    outer->complete(relabel(st, name, what));
  });
  session->pairs->submit(peer_rank, std::move(*entry));
  return Handle(outer);
}

}  // namespace

Handle send_async(std::string name, TensorView tensor, int dst, const ProcessSet& process_set) {
  return point_to_point(/*send=*/true, std::move(name), tensor, dst, process_set);
}

Handle recv_async(std::string name, TensorView tensor, int src, const ProcessSet& process_set) {
  return point_to_point(/*send=*/false, std::move(name), tensor, src, process_set);
}

Status send(std::string name, TensorView tensor, int dst, const ProcessSet& process_set) {
  return send_async(std::move(name), tensor, dst, process_set).wait();
}

Status recv(std::string name, TensorView tensor, int src, const ProcessSet& process_set) {
  return recv_async(std::move(name), tensor, src, process_set).wait();
}

}  // namespace kolo
