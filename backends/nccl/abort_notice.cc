#include "backends/nccl/abort_notice.h"

#include <chrono>

namespace kolo::nccl {

AbortNotice::AbortNotice(Store* store, const std::string& prefix, int rank)
    : store_(store),
      count_key_(prefix + "/nccl/aborts"),
      notice_key_(prefix + "/nccl/abort"),
      rank_(rank) {}

Status AbortNotice::publish(const Status& why) {
  if (!store_) return Status::Ok();
  Result<int64_t> nth = store_->add(count_key_, 1);
  if (!nth.ok()) return nth.status();
  if (*nth != 1) return Status::Ok();  // a rank aborted first: its reason is the cause
  return store_->set(notice_key_, "rank " + std::to_string(rank_) + ": " + why.to_string());
}

Result<std::optional<std::string>> AbortNotice::first() {
  if (!store_) return std::optional<std::string>();
  // The counter comes first: a notice that is on its way (counted, not written yet) is
  // waited for briefly, so that a check never misses the first rank's reason for a later one.
  Result<bool> counted = store_->check(count_key_);
  if (!counted.ok()) return counted.status();
  if (!*counted) return std::optional<std::string>();
  Result<std::string> notice = store_->get(notice_key_, std::chrono::milliseconds(1000));
  if (!notice.ok()) return notice.status();
  return std::optional<std::string>(std::move(*notice));
}

}  // namespace kolo::nccl
