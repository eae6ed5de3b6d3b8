#include "rendezvous/elastic_world.h"

#include <algorithm>
#include <thread>

namespace kolo::elastic_protocol {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often a blocked wait looks at the generation: the delay a superseded generation's waits
// add to a re-form (a rare path: a member lost while the world re-forms).
constexpr milliseconds kWatchSlice{20};
constexpr std::string_view kSuperseded = " was superseded by generation ";

Result<std::string> end_message(Store& store) {
  KOLO_ASSIGN_OR_RETURN(bool ended, store.check(kEndKey));
  if (!ended) return std::string();
  return store.get(kEndKey, milliseconds(1000));
}

// The plan of generation `g`, which kolorun wrote before it published g.
Result<Plan> read_plan(Store& store, int64_t g) {
  KOLO_ASSIGN_OR_RETURN(std::string text, store.get(plan_key(g), milliseconds(1000)));
  KOLO_ASSIGN_OR_RETURN(Plan plan, Plan::parse(text));
  if (plan.generation != g)
    return Status::InvalidArgument("elastic plan under " + plan_key(g) + " is of generation " +
                                   std::to_string(plan.generation));
  return plan;
}

}  // namespace

GenerationWatch::GenerationWatch(std::unique_ptr<Store> inner, int64_t generation)
    : inner_(std::move(inner)), generation_(generation) {}

Status GenerationWatch::set(const std::string& key, const std::string& value) {
  return inner_->set(key, value);
}
Result<int64_t> GenerationWatch::add(const std::string& key, int64_t delta) {
  return inner_->add(key, delta);
}
Result<bool> GenerationWatch::check(const std::string& key) { return inner_->check(key); }

Status GenerationWatch::still_current(const std::string& waiting_for) {
  KOLO_ASSIGN_OR_RETURN(std::string ended, end_message(*inner_));
  if (!ended.empty()) return Status::Aborted(ended);
  KOLO_ASSIGN_OR_RETURN(int64_t newest, newest_generation(*inner_));
  if (newest > generation_)
    return Status::Aborted("elastic: generation " + std::to_string(generation_) +
                           std::string(kSuperseded) + std::to_string(newest) +
                           " while waiting for " + waiting_for);
  return Status::Ok();
}

Result<std::string> GenerationWatch::get(const std::string& key, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    Result<std::string> got = inner_->get(key, std::clamp(left, milliseconds(0), kWatchSlice));
    if (got.ok() || got.status().code() != StatusCode::kTimeout || left <= kWatchSlice) return got;
    KOLO_RETURN_IF_ERROR(still_current(key));
  }
}

Status GenerationWatch::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    Status st = inner_->wait(keys, std::clamp(left, milliseconds(0), kWatchSlice));
    if (st.ok() || st.code() != StatusCode::kTimeout || left <= kWatchSlice) return st;
    KOLO_RETURN_IF_ERROR(still_current(keys.empty() ? std::string("nothing") : keys.front()));
  }
}

bool is_superseded(const Status& st) {
  return st.code() == StatusCode::kAborted && st.message().find(kSuperseded) != std::string::npos;
}

Result<int64_t> newest_generation(Store& store) {
  KOLO_ASSIGN_OR_RETURN(int64_t g, store.add(kGenerationKey, 0));
  if (g > 0) return g;
  KOLO_ASSIGN_OR_RETURN(bool first, store.check(plan_key(0)));
  return first ? int64_t{0} : int64_t{-1};
}

Result<Plan> join_generation(Store& store, int64_t worker, int64_t after, milliseconds timeout) {
  const Clock::time_point start = Clock::now();
  bool asked = false;  // for a new generation (a member) or admission (a new worker)
  milliseconds pause{1};
  while (true) {
    KOLO_ASSIGN_OR_RETURN(std::string ended, end_message(store));
    if (!ended.empty()) return Status::Aborted(ended);
    KOLO_ASSIGN_OR_RETURN(int64_t newest, newest_generation(store));
    if (newest > after) {
      KOLO_ASSIGN_OR_RETURN(Plan plan, read_plan(store, newest));
      if (plan.rank_of(worker)) return plan;
      if (after >= 0)
        return Status::PeerFailure("elastic: worker " + std::to_string(worker) +
                                   " is not a member of generation " + std::to_string(newest) +
                                   " (workers " + plan.workers_text() +
                                   "): kolorun formed the world without it");
    }
    if (!asked) {
      asked = true;
      if (after >= 0 && newest <= after) {
        KOLO_RETURN_IF_ERROR(store.add(reform_key(after), 1).status());
      } else if (after < 0) {
        KOLO_RETURN_IF_ERROR(store.set(ready_key(worker), "ready"));
      }
    }
    const auto waited = Clock::now() - start;
    if (waited >= timeout)
      return Status::Timeout(
          "elastic: worker " + std::to_string(worker) + " waited " +
          std::to_string(std::chrono::duration_cast<milliseconds>(waited).count()) +
          " ms for a generation " + (after >= 0 ? "after " + std::to_string(after) + " " : "") +
          "that names it; the newest is " + std::to_string(newest));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(8));
  }
}

}  // namespace kolo::elastic_protocol
