// Stopping timelines in an orderly way when the process is told to terminate.
//
// kolorun stops the other ranks with SIGTERM when one fails, and users press Ctrl-C (SIGINT):
// exactly the runs whose traces matter. Once something is registered here, the first SIGTERM or
// SIGINT makes a watcher thread (not the signal handler, which may only write to a pipe) call
// stop_for_signal() on every registered target still alive, then restore the signal's previous
// disposition and raise it again, so the process ends as it would have (killed by the signal,
// or the program's own handler runs). A signal that was ignored at registration stays ignored.
// Thread-safety: register_for_signal_stop may be called from any thread.
#pragma once

#include <memory>
#include <string_view>

namespace kolo::timeline_detail {

class SignalStoppable {
 public:
  virtual ~SignalStoppable() = default;
  // Called on the watcher thread; `reason` names the signal ("the process received SIGTERM").
  virtual void stop_for_signal(std::string_view reason) = 0;
};

// Registers `target` (held weakly: a destroyed target is skipped) and installs the handlers on
// first use. Registering the same target twice is harmless.
void register_for_signal_stop(std::weak_ptr<SignalStoppable> target);

}  // namespace kolo::timeline_detail
