// GroupedHandle: the caller's side of a grouped allgather or reducescatter (kolo/kolo.h).
//
// A group runs as one Kolo operation on one packed buffer; wait() unpacks that operation's
// output into one HostTensor per member. Copies observe the same group, and the packed
// buffers live until the operation completes, even when every copy is dropped before.
//
// Thread-safety: every method may be called from any thread; wait() hands the outputs to the
// first caller that receives them OK (later calls return PreconditionFailed).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kolo/handle.h"
#include "kolo/status.h"
#include "kolo/tensor.h"

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo {

class GroupedHandle {
 public:
  // Turns the completed packed operation (OK or failed) into the members' outputs or the
  // group's error (Mismatch when the ranks' groups disagree). Called at most once, by wait().
  // Empty: wait() returns the packed operation's status (a group rejected at submission).
  using Unpack = std::function<Result<std::vector<HostTensor>>(const Handle& packed)>;

  // An empty handle: valid() is false and wait() returns PreconditionFailed.
  GroupedHandle() = default;
  // `keep_alive` is held until `packed` completes (the packed input buffer).
  GroupedHandle(Handle packed, Unpack unpack, std::shared_ptr<const void> keep_alive);

  bool valid() const { return state_ != nullptr; }
  // The group's name.
  const std::string& name() const;
  // True once the operation completed (successfully or not). Never blocks.
  bool poll() const;
  // Blocks until the operation completes; returns the members' outputs in submission order,
  // or the operation's error. With a timeout, Timeout when it has not completed by then.
  Result<std::vector<HostTensor>> wait(
      std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace kolo
#pragma GCC visibility pop
