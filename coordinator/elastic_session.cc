// kolo::elastic::run() and the calls it is made of (include/kolo/elastic.h): the coordinator's
// side of elastic training, as the State (elastic/) is the data's. The world itself is re-formed
// by kolo::shutdown() and kolo::init(), which joins the next generation (Note [Elastic
// rendezvous] in rendezvous/elastic_plan.h); what is here decides when, and brings the State and
// the caller's callbacks along.
#include <string>

#include "common/logging.h"
#include "coordinator/elastic_hooks.h"
#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace kolo::elastic {

namespace {

// A newest generation rank 0 could not read: every rank fails check_world() alike.
constexpr int64_t kUnreadable = -2;

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

bool enabled() { return kolo::detail::elastic_enabled(); }

int64_t generation() { return kolo::detail::elastic_generation(); }

Status check_world() {
  if (!enabled() || !is_initialized()) return Status::Ok();
  const int64_t mine = generation();
  int64_t newest = mine;
  if (rank() == 0) {
    Result<int64_t> read = kolo::detail::elastic_newest_generation();
    if (!read.ok()) KOLO_LOG_WARNING("kolo::elastic::check_world(): " + read.status().message());
    newest = read.ok() ? *read : kUnreadable;
  }
  KOLO_RETURN_IF_ERROR(broadcast("elastic.check_world", view_of(&newest, {1})));
  if (newest == kUnreadable)
    return Status::IoError(
        "kolo::elastic::check_world(): rank 0 could not read the newest generation from the "
        "store (its log says why)");
  if (newest > mine)
    return Status::WorldChanged("kolo::elastic: kolorun formed generation " +
                                std::to_string(newest) + " (ranks to add) while this rank is in " +
                                std::to_string(mine) + ": re-form (kolo::elastic::run() does)");
  return Status::Ok();
}

bool is_world_change(const Status& st) {
  if (st.ok()) return false;
  if (st.code() == StatusCode::kWorldChanged || st.code() == StatusCode::kPeerFailure) return true;
  // An operation that failed because the session stopped under it says so in its own words
  // (Aborted, Timeout); the session's failure says why.
  const Status broke = kolo::detail::world_failure();
  return broke.code() == StatusCode::kPeerFailure || broke.code() == StatusCode::kTimeout ||
         broke.code() == StatusCode::kIoError;
}

Status reform() {
  if (!enabled())
    return Status::PreconditionFailed(
        "kolo::elastic::reform(): this is not an elastic job (kolorun --min-np/--max-np starts "
        "one)");
  // A broken world's shutdown reports the break, which the caller knows already.
  if (Status down = kolo::shutdown(); !down.ok())
    KOLO_LOG_DEBUG("kolo::elastic::reform(): shutdown: " + down.message());
  return kolo::init();
}

Status run(State& state, const std::function<Status()>& fn, const RunOptions& options) {
  const int limit =
      options.reset_limit >= 0 ? options.reset_limit : kolo::detail::elastic_reset_limit();
  int resets = 0;
  Status st = state.sync();
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
