#include "tools/kolorun/elastic_driver.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace kolo::kolorun {

namespace ep = elastic_protocol;

std::string join_and(const std::vector<std::string>& items) {
  std::string out;
  for (size_t k = 0; k < items.size(); ++k)
    out += (k == 0 ? "" : k + 1 == items.size() ? " and " : ", ") + items[k];
  return out;
}

ElasticDriver::ElasticDriver(Store& store, DriverOptions options)
    : store_(store), options_(options) {}

Status ElasticDriver::start(const std::vector<std::pair<int64_t, std::string>>& workers) {
  for (const auto& [id, host] : workers) workers_[id].host = host;
  return publish(0, workers);
}

void ElasticDriver::add_worker(int64_t worker, std::string host) {
  Worker& w = workers_[worker];
  w.host = std::move(host);
  w.state = WorkerState::kStarting;
}

void ElasticDriver::on_exit(int64_t worker, bool clean, std::string how, bool stopped) {
  auto it = workers_.find(worker);
  if (it == workers_.end() || it->second.state == WorkerState::kExited) return;
  Worker& w = it->second;
  // A stuck worker left out of the newest generation leaves nothing to re-form.
  const bool was_member = w.state == WorkerState::kMember && plan_.rank_of(worker).has_value();
  w.state = WorkerState::kExited;
  w.clean = clean;
  w.failed = !clean && !stopped;
  w.how = std::move(how);
  if (w.failed) ++failures_on_[w.host];
  if (!was_member) return;
  // A member kolorun stopped leaves the world however it exits (a SIGTERM handler may exit 0).
  if (stopped || !clean) {
    reform_due_ = true;
  } else if (!finishing_) {
    finishing_ = true;
    finisher_ = worker;
  }
}

Status ElasticDriver::step(Clock::time_point now) {
  if (end_message_ || !published_) return Status::Ok();
  KOLO_RETURN_IF_ERROR(poll_store(now));
  if (finishing_) {
    if (reform_due_) return end(finishing_message());
    return Status::Ok();
  }
  if (live_count() < options_.min_np) return end(min_np_message());
  if (!reform_due_ && !joiners_due(now)) return Status::Ok();
  std::vector<std::pair<int64_t, std::string>> next = candidates();
  // Fewer than --min-np ready while enough live: the rest are starting; wait for them.
  if (static_cast<int>(next.size()) < options_.min_np) return Status::Ok();
  return publish(plan_.generation + 1, next);
}

Status ElasticDriver::poll_store(Clock::time_point now) {
  for (auto& [id, w] : workers_) {
    if (w.state != WorkerState::kStarting) continue;
    KOLO_ASSIGN_OR_RETURN(bool ready, store_.check(ep::ready_key(id)));
    if (!ready) continue;
    w.state = WorkerState::kReady;
    w.ready_since = now;
  }
  KOLO_RETURN_IF_ERROR(poll_stuck());
  if (reform_due_) return Status::Ok();
  // add(0) reads the counter in one round trip (a missing key counts as 0).
  KOLO_ASSIGN_OR_RETURN(int64_t requests, store_.add(ep::reform_key(plan_.generation), 0));
  if (requests > 0) reform_due_ = true;
  return Status::Ok();
}

Status ElasticDriver::poll_stuck() {
  if (stuck_read_ == plan_.generation) return Status::Ok();
  KOLO_ASSIGN_OR_RETURN(bool named, store_.check(ep::stuck_key(plan_.generation)));
  if (!named) return Status::Ok();
  KOLO_ASSIGN_OR_RETURN(std::string ids, store_.get(ep::stuck_key(plan_.generation),
                                                    std::chrono::milliseconds(1000)));
  stuck_read_ = plan_.generation;
  std::istringstream list(ids);
  for (std::string id; std::getline(list, id, ',');) {
    auto it = workers_.find(std::strtoll(id.c_str(), nullptr, 10));
    if (it == workers_.end() || it->second.state != WorkerState::kMember || it->second.stuck)
      continue;
    it->second.stuck = true;
    to_stop_.push_back(it->first);
  }
  return Status::Ok();
}

std::vector<int64_t> ElasticDriver::take_stuck() { return std::exchange(to_stop_, {}); }

Status ElasticDriver::end(std::string message) {
  if (end_message_) return Status::Ok();
  end_message_ = std::move(message);
  return store_.set(ep::kEndKey, *end_message_);
}

Status ElasticDriver::publish(int64_t generation,
                              const std::vector<std::pair<int64_t, std::string>>& workers) {
  KOLO_ASSIGN_OR_RETURN(ep::Plan plan, ep::make_plan(generation, workers));
  // The plan first: a worker that reads G from kGenerationKey must find G's plan.
  KOLO_RETURN_IF_ERROR(store_.set(ep::plan_key(generation), plan.encode()));
  const int64_t raise = published_ ? generation - plan_.generation : generation;
  KOLO_RETURN_IF_ERROR(store_.add(ep::kGenerationKey, raise).status());
  for (int r = 0; r < plan.size(); ++r) {
    Worker& w = workers_[plan.members[static_cast<size_t>(r)].worker];
    w.state = WorkerState::kMember;
    w.last_rank = std::make_pair(generation, r);
  }
  plan_ = std::move(plan);
  published_ = true;
  reform_due_ = false;
  return Status::Ok();
}

std::vector<std::pair<int64_t, std::string>> ElasticDriver::candidates() const {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const ep::PlanMember& m : plan_.members) {
    const Worker& w = workers_.at(m.worker);
    if (w.state == WorkerState::kMember && !w.stuck) out.emplace_back(m.worker, m.host);
  }
  for (const auto& [id, w] : workers_)
    if (w.state == WorkerState::kReady) out.emplace_back(id, w.host);
  return out;
}

bool ElasticDriver::joiners_due(Clock::time_point now) const {
  std::optional<Clock::time_point> first_ready;
  bool starting = false;
  for (const auto& [id, w] : workers_) {
    starting |= w.state == WorkerState::kStarting;
    if (w.state == WorkerState::kReady && (!first_ready || *w.ready_since < *first_ready))
      first_ready = w.ready_since;
  }
  return first_ready && (!starting || now - *first_ready >= options_.join_batch);
}

bool ElasticDriver::may_start_on(const std::string& host) const {
  return !end_message_ && !finishing_ && live_count() < options_.max_np && !blacklisted(host);
}

bool ElasticDriver::blacklisted(const std::string& host) const {
  auto it = failures_on_.find(host);
  return it != failures_on_.end() && it->second >= options_.blacklist_after;
}

bool ElasticDriver::finished() const {
  if (!finishing_) return false;
  return std::all_of(plan_.members.begin(), plan_.members.end(), [&](const ep::PlanMember& m) {
    return workers_.at(m.worker).state == WorkerState::kExited;
  });
}

bool ElasticDriver::succeeded() const {
  if (!finished() || end_message_) return false;
  return std::all_of(plan_.members.begin(), plan_.members.end(),
                     [&](const ep::PlanMember& m) { return workers_.at(m.worker).clean; });
}

int ElasticDriver::live_count() const {
  int n = 0;
  for (const auto& [id, w] : workers_) n += w.state != WorkerState::kExited;
  return n;
}

std::optional<WorkerState> ElasticDriver::state_of(int64_t worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return std::nullopt;
  return it->second.state;
}

std::string ElasticDriver::rank_text(const Worker& w) const {
  if (!w.last_rank) return "not yet a rank";
  return "rank " + std::to_string(w.last_rank->second) + " of generation " +
         std::to_string(w.last_rank->first);
}

std::string ElasticDriver::lost_text() const {
  std::vector<std::string> lost;
  for (const auto& [id, w] : workers_)
    if (w.failed)
      lost.push_back("worker " + std::to_string(id) + " (" + rank_text(w) + ", " + w.how + ")");
  return lost.empty() ? "no worker" : join_and(lost);
}

std::string ElasticDriver::survivors_text() const {
  std::vector<std::string> alive;
  for (const auto& [id, w] : workers_) {
    if (w.state == WorkerState::kExited) continue;
    const std::string rank = w.state == WorkerState::kMember
                                 ? "rank " + std::to_string(w.last_rank->second)
                                 : std::string("not yet a rank");
    alive.push_back("worker " + std::to_string(id) + " (" + rank + ")");
  }
  return alive.empty() ? "none" : join_and(alive);
}

std::string ElasticDriver::min_np_message() const {
  const int live = live_count();
  return "kolorun: " + std::to_string(live) + (live == 1 ? " rank" : " ranks") +
         " left, fewer than --min-np " + std::to_string(options_.min_np) + ": lost " + lost_text() +
         "; survivors: " + survivors_text();
}

std::string ElasticDriver::finishing_message() const {
  const Worker& f = workers_.at(*finisher_);
  return "kolorun: the world broke after worker " + std::to_string(*finisher_) + " (" +
         rank_text(f) + ") had finished (" + f.how +
         "), and a finishing job is not re-formed: lost " + lost_text() +
         "; survivors: " + survivors_text();
}

}  // namespace kolo::kolorun
