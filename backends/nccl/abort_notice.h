// AbortNotice: how one rank's NCCL abort reaches the others through the rendezvous store, for
// the window where the control plane cannot tell them: after an orderly shutdown was agreed,
// the runtimes no longer talk, and a rank whose GPU operation waits on a peer that aborted its
// communicator (an NCCL error, its op timeout) would wait in its backend's destructor until its
// own KOLO_OP_TIMEOUT. NCCL itself does not tell it when the peers share a host (the P2P and
// shared-memory transports poll flags in GPU memory; only the network transports see a peer's
// connection close).
//
// Keys, under the backend's store prefix: `<prefix>/nccl/aborts` (a counter: which abort came
// first) and `<prefix>/nccl/abort` ("rank R: <reason>", written by the first one only, so that
// every rank reports the original cause).
//
// Errors: the store's (IoError when it cannot be reached), returned to the caller, which treats
// them as "no notice" (a failing rank must not fail again because the store is gone).
// Thread-safety: the Store's (any thread); the object holds no state of its own.
#pragma once

#include <optional>
#include <string>

#include "kolo/status.h"
#include "rendezvous/store.h"

namespace kolo::nccl {

class AbortNotice {
 public:
  // `store` is borrowed and must outlive this object; null: a one-rank group, no notices.
  AbortNotice(Store* store, const std::string& prefix, int rank);

  // Records that this rank aborted its communicator because of `why`, unless a rank did first.
  Status publish(const Status& why);
  // The first abort a rank published ("rank R: <reason>"), nullopt while none did. Does not
  // wait.
  Result<std::optional<std::string>> first();

 private:
  Store* const store_;
  const std::string count_key_, notice_key_;
  const int rank_;
};

}  // namespace kolo::nccl
