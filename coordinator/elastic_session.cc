// The calls kolo::elastic::run() is made of (include/kolo/elastic.h): the coordinator's side of
// elastic training; run() itself and the State are elastic/'s. The world itself is re-formed by
// kolo::shutdown() and kolo::init(), which joins the next generation (Note [Elastic rendezvous]
// in rendezvous/elastic_plan.h); what is here decides when.
#include <string>

#include "common/logging.h"
#include "coordinator/elastic_hooks.h"
#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace kolo::elastic {

namespace {

// A newest generation rank 0 could not read: every rank fails check_world() alike.
constexpr int64_t kUnreadable = -2;

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

int reset_limit() { return kolo::detail::elastic_reset_limit(); }

}  // namespace kolo::elastic
