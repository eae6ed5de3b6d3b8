#include "coordinator/failure_board.h"

#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

namespace kolo::coord {

namespace {

// A record is one store value; a status message of a broken link is a line or two.
constexpr size_t kMaxRecordBytes = 2048;
// How long to wait for the first record's value when its number is taken but its value not yet
// written (its rank is between its add and its set).
constexpr std::chrono::milliseconds kRecordWait{1000};
// How long a rank that saw a timeout waits for every rank's record before it calls the one
// rank without a record frozen: the survivors of a frozen rank time out within a few
// milliseconds of each other (they wait in the same collective), and a live rank that timed out
// too records within that time, so a second is ample. It delays only the report of a timeout,
// and by the whole second exactly when a rank is frozen.
constexpr std::chrono::milliseconds kSettle{1000};

bool is_timeout(const std::string& record) {
  return record.find(" saw: Timeout: ") != std::string::npos;
}

// "rank R saw: ..." -> R; -1 when the record is not one.
int recorder(const std::string& record) {
  int r = -1;
  return std::sscanf(record.c_str(), "rank %d saw: ", &r) == 1 ? r : -1;
}

}  // namespace

FailureBoard::FailureBoard(std::shared_ptr<Store> store, std::string prefix, int rank, int size)
    : store_(std::move(store)), prefix_(std::move(prefix)), rank_(rank), size_(size) {}

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
  if (!store_->set(key(std::to_string(*number)), record).ok()) return observed;
  Result<std::string> first =
      *number == 1 ? Result<std::string>(record) : store_->get(key("1"), kRecordWait);
  if (!first.ok()) return observed;
  // "rank R saw: Code: message" reads as "as rank R saw it: Code: message".
  std::string cause = *first;
  const size_t colon = cause.find(" saw: ");
  if (colon != std::string::npos)
    cause = "as " + cause.substr(0, colon) + " saw it: " + cause.substr(colon + 6);
  std::optional<int> silent;
  if (observed.code() == StatusCode::kTimeout || is_timeout(*first)) silent = silent_rank();
  if (!silent) {
    if (*number == 1) return observed;
    return Status(observed.code(), "the job's first failure, " + cause + "; this rank (" + me +
                                       ") then saw: " + observed.message());
  }
  std::string text = "the job's first failure: rank " + std::to_string(*silent) +
                     " stopped answering (the one rank that recorded no failure; the others timed "
                     "out waiting on whichever link they were using); ";
  if (*number == 1)
    return Status(observed.code(), text + "this rank (" + me + ") saw: " + observed.message());
  return Status(observed.code(),
                text + cause + "; this rank (" + me + ") then saw: " + observed.message());
}

std::optional<int> FailureBoard::silent_rank() {
  const auto deadline = std::chrono::steady_clock::now() + kSettle;
  int64_t count = 0;
  while (true) {
    Result<int64_t> c = store_->add(key("count"), 0);
    if (!c.ok()) return std::nullopt;
    count = *c;
    if (count >= size_ || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<bool> recorded(static_cast<size_t>(size_), false);
  for (int64_t n = 1; n <= count; ++n) {
    Result<std::string> r = store_->get(key(std::to_string(n)), std::chrono::milliseconds(200));
    if (!r.ok()) return std::nullopt;  // a number taken, its record not written: cannot tell
    const int who = recorder(*r);
    if (who >= 0 && who < size_) recorded[static_cast<size_t>(who)] = true;
  }
  std::optional<int> silent;
  for (int r = 0; r < size_; ++r) {
    if (recorded[static_cast<size_t>(r)]) continue;
    if (silent) return std::nullopt;  // several: each may be frozen, or merely slow to record
    silent = r;
  }
  return silent;
}

}  // namespace kolo::coord
