// kolo::elastic::run() (include/kolo/elastic.h): calls fn, and re-forms the world, syncs the State
// and calls fn again when the world changes under it. Built on the public API only: reform(),
// is_world_change() and check_world() are the coordinator's (coordinator/elastic_session.cc).
#include <string>

#include "common/logging.h"
#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace kolo::elastic {

namespace {

// After reform(): the newest commit on every rank (sync() rolls each rank back to it, writing its
// registered memory), then what depends on the world.
Status rejoin(State& state) {
  KOLO_RETURN_IF_ERROR(state.sync());
  if (rank() == 0)
    KOLO_LOG_WARNING("kolo::elastic: generation " + std::to_string(generation()) +
                     " formed: " + std::to_string(size()) + " ranks; resuming from commit " +
                     std::to_string(state.commits()));
  return detail::call_reset_callbacks(state);
}

}  // namespace

Status run(State& state, const std::function<Status()>& fn, const RunOptions& options) {
  const int limit = options.reset_limit >= 0 ? options.reset_limit : reset_limit();
  int resets = 0;
  Status st = state.sync();
  // A worker that joins a re-formed world (a replacement, a discovered slot) takes a State
  // synced from a world of another size: what depends on the size is rebuilt, as after a reset.
  if (st.ok() && generation() > 0) st = detail::call_reset_callbacks(state);
  while (true) {
    if (st.ok()) st = fn();
    if (st.ok() || !enabled() || !is_world_change(st)) return st;
    if (resets == limit)
      return st.with_context("kolo::elastic::run(): gave up after re-forming the world " +
                             std::to_string(resets) +
                             " times (the reset limit: RunOptions::"
                             "reset_limit or KOLO_ELASTIC_RESET_LIMIT)");
    ++resets;
    KOLO_LOG_WARNING("kolo::elastic: re-forming the world (" + std::to_string(resets) +
                     " of at most " + std::to_string(limit) + ") after: " + st.to_string());
    st = reform();
    if (st.ok()) st = rejoin(state);
  }
}

}  // namespace kolo::elastic
