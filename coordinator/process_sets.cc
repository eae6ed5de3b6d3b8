#include "coordinator/process_sets.h"

#include <algorithm>

#include "coordinator/message.h"
#include "coordinator/submit.h"
#include "kolo/kolo.h"

namespace kolo::coord {

std::string ranks_phrase(const std::vector<int>& ranks);

namespace {

std::string list_string(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

// "rank 3", "ranks 0, 2".
std::string ranks_phrase(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

Result<std::vector<int>> agree_on_ranks(const std::vector<std::vector<int>>& lists) {
  const int size = static_cast<int>(lists.size());
  // Lists that hold the same ranks in another order agree: the set is what they name.
  std::vector<std::pair<std::vector<int>, std::vector<int>>> groups;  // sorted list, who
  for (int r = 0; r < size; ++r) {
    std::vector<int> sorted = lists[r];
    std::sort(sorted.begin(), sorted.end());
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == sorted; });
    if (it == groups.end())
      groups.push_back({sorted, {r}});
    else
      it->second.push_back(r);
  }
  if (groups.size() > 1) {
    std::string msg = "add_process_set: the ranks differ between ranks: ";
    for (size_t i = 0; i < groups.size(); ++i)
      msg += (i ? "; " : "") + ranks_phrase(groups[i].second) + " passed " +
             list_string(lists[groups[i].second[0]]);
    return Status::InvalidArgument(msg);
  }
  const std::vector<int>& given = lists.at(0);
  const std::vector<int>& sorted = groups[0].first;
  if (sorted.empty()) return Status::InvalidArgument("add_process_set: the list of ranks is empty");
  for (int r : sorted)
    if (r < 0 || r >= size)
      return Status::InvalidArgument(
          "add_process_set: rank " + std::to_string(r) + " in " + list_string(given) +
          " is out of range: the job has ranks 0.." + std::to_string(size - 1));
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i] == sorted[i - 1])
      return Status::InvalidArgument("add_process_set: rank " + std::to_string(sorted[i]) +
                                     " appears more than once in " + list_string(given));
  return sorted;
}

ProcessSetTable::ProcessSetTable(std::shared_ptr<Runtime> global, MakeSetBackends make_backends)
    : global_(std::move(global)), make_backends_(std::move(make_backends)) {}

ProcessSetTable::~ProcessSetTable() { shutdown(); }

Result<ProcessSet> ProcessSetTable::add(std::vector<int> ranks) {
  MutexLock add_lock(add_mu_);
  const int world = global_->topology().size;
  // Every rank sends its list as given (the count first), so that the verdict, computed alike
  // everywhere from every list, can name who disagrees. Nothing is checked before: a rank
  // that returned early would leave the others waiting in the allgather.
  std::vector<int32_t> message;
  message.push_back(static_cast<int32_t>(ranks.size()));
  message.insert(message.end(), ranks.begin(), ranks.end());
  const std::string name =
      std::string(kInternalNamePrefix) + "add_process_set." + std::to_string(adds_++);
  KOLO_ASSIGN_OR_RETURN(auto entry,
                        build_internal_allgather(
                            name, view_of(message.data(), {static_cast<int64_t>(message.size())})));
  Handle h = global_->submit(std::move(entry));
  KOLO_RETURN_IF_ERROR(h.wait().with_context("add_process_set"));
  HostTensor all = h.take_output();
  const int32_t* p = all.data_as<int32_t>();
  const int64_t n = all.num_elements();
  std::vector<std::vector<int>> lists(world);
  int64_t at = 0;
  for (int r = 0; r < world; ++r) {
    if (at >= n || p[at] < 0 || at + 1 + p[at] > n)
      return Status::Internal("add_process_set: malformed agreement message from rank " +
                              std::to_string(r));
    lists[r].assign(p + at + 1, p + at + 1 + p[at]);
    at += 1 + p[at];
  }
  KOLO_ASSIGN_OR_RETURN(std::vector<int> members, agree_on_ranks(lists));

  const int32_t id = next_id_++;
  KOLO_ASSIGN_OR_RETURN(Member m, create(id, members));
  MutexLock lock(mu_);
  sets_[id] = m;
  return m.set;
}

Result<ProcessSetTable::Member> ProcessSetTable::create(int32_t id,
                                                        const std::vector<int>& members) {
  Member m{ProcessSet(id, members), nullptr, {}, {}};
  // Not set.rank(): kolo::rank() takes the lock that init() holds while it adds
  // KOLO_PROCESS_SETS.
  const int me = global_->topology().rank;
  auto at_me = std::lower_bound(members.begin(), members.end(), me);
  const int set_rank =
      at_me != members.end() && *at_me == me ? static_cast<int>(at_me - members.begin()) : -1;
  if (set_rank >= 0) {
    const std::string label = "process set " + std::to_string(id);
    KOLO_ASSIGN_OR_RETURN(SetBackends b, make_backends_(id, members, set_rank));
    RuntimeConfig config = global_->config();
    // The set records on the global set's timeline (one file per rank), on rows of its own;
    // the autotuner stays the global set's (its score is the step time, which the global
    // set's mark_step() measures).
    config.timeline_path.clear();
    config.autotune.enabled = false;
    config.label = label;
    // Its members are named to the departure record by their job ranks (Note [Departures]).
    if (config.describe_departure)
      config.describe_departure = [job = std::move(config.describe_departure),
                                   members](int set_rank) { return job(members[set_rank]); };
    Topology t;
    t.rank = set_rank;
    t.size = static_cast<int>(members.size());
    KOLO_ASSIGN_OR_RETURN(
        std::unique_ptr<Runtime> rt,
        Runtime::create(std::move(config), t, std::move(b.data), std::move(b.control),
                        std::move(b.gpu),
                        global_->timeline_rows("set " + std::to_string(id) + ": ")));
    m.runtime = std::move(rt);
  }
  return m;
}

Result<ProcessSet> ProcessSetTable::carry(int32_t id, std::vector<int> members,
                                          std::vector<int> former) {
  MutexLock add_lock(add_mu_);
  next_id_ = std::max(next_id_, id + 1);
  KOLO_ASSIGN_OR_RETURN(Member m, create(id, members));
  m.former = std::move(former);
  MutexLock lock(mu_);
  sets_[id] = m;
  return m.set;
}

void ProcessSetTable::close(int32_t id, std::vector<int> former, std::string why) {
  MutexLock add_lock(add_mu_);
  next_id_ = std::max(next_id_, id + 1);
  MutexLock lock(mu_);
  sets_[id] = Member{ProcessSet(id, former), nullptr, former, std::move(why)};
}

Status ProcessSetTable::remove(const ProcessSet& set) {
  if (set.is_global())
    return Status::InvalidArgument("remove_process_set: the global process set cannot be removed");
  MutexLock add_lock(add_mu_);
  std::shared_ptr<Runtime> runtime;
  {
    MutexLock lock(mu_);
    auto it = sets_.find(set.id());
    if (it == sets_.end())
      return Status::InvalidArgument("remove_process_set: process set " + std::to_string(set.id()) +
                                     " does not exist (already removed, or never added)");
    runtime = std::move(it->second.runtime);
    sets_.erase(it);
  }
  // Submitters holding the Runtime (a submit in progress) keep it alive; its pending and
  // later operations fail with the shutdown's Aborted.
  if (runtime) return runtime->shutdown();
  return Status::Ok();
}

Result<std::shared_ptr<Runtime>> ProcessSetTable::runtime_for(const ProcessSet& set,
                                                              const std::string& what) const {
  if (set.is_global()) return global_;
  MutexLock lock(mu_);
  auto it = sets_.find(set.id());
  const int me = global_->topology().rank;
  if (it == sets_.end())
    return Status::InvalidArgument(what + ": process set " + std::to_string(set.id()) +
                                   " does not exist on rank " + std::to_string(me) +
                                   " (removed, or never added)");
  if (!it->second.closed.empty())
    return Status::PreconditionFailed(what + ": " + it->second.closed);
  if (!it->second.runtime)
    return Status::InvalidArgument(what + ": rank " + std::to_string(me) + " is not in " +
                                   it->second.set.to_string());
  // A ProcessSet made by hand with an existing id but other ranks.
  if (set.ranks() != it->second.set.ranks() &&
      (it->second.former.empty() || set.ranks() != it->second.former))
    return Status::InvalidArgument(what + ": the process set passed has id " +
                                   std::to_string(set.id()) + " but not the ranks of " +
                                   it->second.set.to_string());
  return it->second.runtime;
}

std::vector<ProcessSet> ProcessSetTable::sets() const {
  std::vector<ProcessSet> out{ProcessSet{}};
  MutexLock lock(mu_);
  for (const auto& [id, m] : sets_)
    if (m.closed.empty()) out.push_back(m.set);
  return out;
}

void ProcessSetTable::shutdown() {
  std::map<int32_t, Member> sets;
  {
    MutexLock lock(mu_);
    sets.swap(sets_);
  }
  for (auto& [id, m] : sets)
    if (m.runtime) (void)m.runtime->shutdown();
}

}  // namespace kolo::coord

namespace kolo {

ProcessSet::ProcessSet(int32_t id, std::vector<int> ranks)
    : id_(id), ranks_(std::make_shared<const std::vector<int>>(std::move(ranks))) {}

std::vector<int> ProcessSet::ranks() const {
  if (ranks_) return *ranks_;
  std::vector<int> all(kolo::size());
  for (int r = 0; r < static_cast<int>(all.size()); ++r) all[r] = r;
  return all;
}

int ProcessSet::size() const { return ranks_ ? static_cast<int>(ranks_->size()) : kolo::size(); }

int ProcessSet::rank() const {
  const int me = kolo::rank();
  if (!ranks_) return me;
  auto it = std::lower_bound(ranks_->begin(), ranks_->end(), me);
  return it != ranks_->end() && *it == me ? static_cast<int>(it - ranks_->begin()) : -1;
}

bool ProcessSet::includes(int global_rank) const {
  if (!ranks_) return global_rank >= 0 && global_rank < kolo::size();
  return std::binary_search(ranks_->begin(), ranks_->end(), global_rank);
}

std::string ProcessSet::to_string() const {
  if (!ranks_) return "the global process set";
  std::string s = "process set " + std::to_string(id_) + " (";
  s += coord::ranks_phrase(*ranks_);
  return s + ")";
}

}  // namespace kolo
