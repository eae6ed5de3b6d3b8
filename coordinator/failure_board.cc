#include "coordinator/failure_board.h"

#include <utility>

namespace kolo::coord {

namespace {

// A record is one store value; a status message of a broken link is a line or two.
constexpr size_t kMaxRecordBytes = 2048;
// How long to wait for the first record's value when its number is taken but its value not yet
// written (its rank is between its add and its set).
constexpr std::chrono::milliseconds kRecordWait{1000};

}  // namespace

FailureBoard::FailureBoard(std::shared_ptr<Store> store, std::string prefix, int rank)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank) {}

Status FailureBoard::name_first_failure(const Status& observed) {
  const StatusCode code = observed.code();
  if (!store_ || (code != StatusCode::kPeerFailure && code != StatusCode::kTimeout &&
                  code != StatusCode::kIoError))
    return observed;
  MutexLock lock(mu_);
  if (!recorded_) {
    recorded_ = true;
    first_observed_ = observed;
    answer_ = record_and_name(observed);
  }
  // The same failure reported again (possibly with context added on the way) gets the same
  // answer; a later, different one keeps its own message.
  if (observed.message().find(first_observed_.message()) != std::string::npos) return answer_;
  return observed;
}

Status FailureBoard::record_and_name(const Status& observed) {
  const std::string me = "rank " + std::to_string(rank_);
  std::string record = me + " saw: " + observed.to_string();
  if (record.size() > kMaxRecordBytes) record.resize(kMaxRecordBytes);
  Result<int64_t> number = store_->add(key("count"), 1);
  if (!number.ok()) return observed;  // no store: what this rank saw is all it knows
  if (!store_->set(key(std::to_string(*number)), record).ok() || *number == 1) return observed;
  Result<std::string> first = store_->get(key("1"), kRecordWait);
  if (!first.ok()) return observed;
  // "rank R saw: Code: message" reads as "as rank R saw it: Code: message".
  std::string cause = *first;
  const size_t colon = cause.find(" saw: ");
  if (colon != std::string::npos)
    cause = "as " + cause.substr(0, colon) + " saw it: " + cause.substr(colon + 6);
  return Status(observed.code(), "the job's first failure, " + cause + "; this rank (" + me +
                                     ") then saw: " + observed.message());
}

}  // namespace kolo::coord
