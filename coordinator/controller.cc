#include "coordinator/controller.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "kolo/tensor.h"
#include "kolo/units.h"

namespace kolo::coord {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::string values_by_rank(const std::vector<std::pair<int, std::string>>& values) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& [rank, value] : values) {
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&value = value](auto& p) { return p.first == value; });
    if (g == groups.end())
      groups.push_back({value, {rank}});
    else
      g->second.push_back(rank);
  }
  std::string msg;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& ranks = groups[i].second;
    msg += (i ? "; " : "");
    msg += ranks.size() == 1 ? "rank " + std::to_string(ranks[0]) : "ranks " + rank_list(ranks);
    msg += " " + std::string(ranks.size() == 1 ? "has " : "have ") + groups[i].first;
  }
  return msg;
}

namespace {

std::string shapes_string(const std::vector<std::vector<int64_t>>& shapes) {
  if (shapes.size() == 1) return shape_string(shapes[0]);
  std::string s = "{";
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shape_string(shapes[i]);
  return s + "}";
}

std::string trailing_dims(const std::vector<std::vector<int64_t>>& shapes) {
  if (shapes.size() != 1 || shapes[0].empty()) return shapes_string(shapes);
  std::vector<int64_t> rest(shapes[0].begin() + 1, shapes[0].end());
  return "[*" + std::string(rest.empty() ? "" : ", ") + shape_string(rest).substr(1);
}

std::string number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

int Controller::named(int rank) const {
  return rank >= 0 && rank < static_cast<int>(rank_names_.size()) ? rank_names_[rank] : rank;
}

std::string Controller::named_list(const std::vector<int>& ranks) const {
  std::vector<int> names;
  for (int r : ranks) names.push_back(named(r));
  return rank_list(names);
}

void Controller::add(int rank, const RequestList& list, const ResponseCache& cache,
                     Clock::time_point now) {
  if (list.shutdown && shutdown_rank_ < 0) shutdown_rank_ = rank;
  if (list.join && joined_.insert(rank).second) last_joined_ = rank;
  changed_ |= list.join || !list.requests.empty();
  for (const Request& q : list.requests) {
    if (cache.contains(q.name) &&
        std::find(evictions_.begin(), evictions_.end(), q.name) == evictions_.end())
      evictions_.push_back(q.name);
    auto [it, inserted] = table_.try_emplace(q.name);
    if (inserted) {
      it->second.seq = next_seq_++;
      it->second.first_seen = now;
    }
    it->second.by_rank[rank] = q;
  }
}

std::optional<std::string> Controller::mismatch(const std::string& name, const Entry& entry) const {
  const Request& ref = entry.by_rank.begin()->second;
  std::string what = std::string(op_type_name(ref.type)) + " '" + name + "'";
  // Lists every rank's value of an attribute when they are not all equal.
  auto check =
      [&](const char* attribute,
          const std::function<std::string(const Request&)>& value) -> std::optional<std::string> {
    std::string first = value(ref);
    bool differs = false;
    for (const auto& [r, q] : entry.by_rank) differs |= value(q) != first;
    if (!differs) return std::nullopt;
    std::vector<std::pair<int, std::string>> values;
    for (const auto& [r, q] : entry.by_rank) values.emplace_back(named(r), value(q));
    return what + ": " + attribute + " differs across ranks: " + values_by_rank(values);
  };

  if (auto m = check("operation", [](const Request& q) { return op_type_name(q.type); })) return m;
  if (auto m = check("dtype", [](const Request& q) { return std::string(dtype_name(q.dtype)); }))
    return m;
  // Only the kind must agree: each rank's tensor lives on its own GPU (cuda:<local rank>).
  if (auto m = check("device type", [](const Request& q) {
        return std::string(q.device.is_cuda() ? "cuda" : "cpu");
      }))
    return m;
  switch (ref.type) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      if (auto m = check("reduce op", [](const Request& q) {
            return std::string(reduce_op_name(q.reduction.op));
          }))
        return m;
      if (auto m = check("prescale", [](const Request& q) { return number(q.reduction.prescale); }))
        return m;
      if (auto m =
              check("postscale", [](const Request& q) { return number(q.reduction.postscale); }))
        return m;
      if (auto m = check("shape", [](const Request& q) { return shapes_string(q.shapes); }))
        return m;
      if (auto m = check("recv_counts", [](const Request& q) {
            return q.splits.empty() ? std::string("none (the even split)") : shape_string(q.splits);
          }))
        return m;
      break;
    case OpType::kBroadcast:
      if (auto m = check("root", [&](const Request& q) { return std::to_string(named(q.root)); }))
        return m;
      if (auto m = check("shape", [](const Request& q) { return shapes_string(q.shapes); }))
        return m;
      break;
    case OpType::kAllgather:
    case OpType::kAlltoall:
      // The first dimension may differ per rank; the rest must agree.
      if (auto m = check("shape beyond the first dimension",
                         [](const Request& q) { return trailing_dims(q.shapes); }))
        return m;
      break;
    case OpType::kBarrier:
    case OpType::kJoin:
      break;
  }
  // Note [Join]: as Horovod's, only allreduce and barrier run while some rank has joined
  // (without having submitted the operation); a joined rank contributes the identity (zeros to
  // a sum) and an average divides by every rank (Executor::AllreducePlan). Allgather, broadcast,
  // alltoall and reducescatter fail on the ranks that submitted them: a joined rank has no rows
  // to gather or scatter and may be the root, and a result that silently depends on who
  // joined is worse than an error.
  std::vector<int> absent;
  for (int r : joined_)
    if (!entry.by_rank.count(r)) absent.push_back(named(r));
  if (!absent.empty() && ref.type != OpType::kAllreduce && ref.type != OpType::kBarrier)
    return what + ": cannot run while " +
           (absent.size() == 1 ? "rank " + std::to_string(absent[0]) + " has"
                               : "ranks " + rank_list(absent) + " have") +
           " joined (join supports allreduce and barrier only, as Horovod's)";
  return std::nullopt;
}

Response Controller::build(const std::string& name, const Entry& entry) const {
  const Request& ref = entry.by_rank.begin()->second;
  Response p;
  p.name = name;
  p.type = ref.type;
  p.dtype = ref.dtype;
  p.device = ref.device;
  p.reduction = ref.reduction;
  p.root = ref.root;
  p.shapes = ref.shapes;
  for (int r : joined_)
    if (entry.by_rank.count(r) == 0) p.joined.push_back(r);
  if (auto m = mismatch(name, entry)) {
    p.kind = Response::Kind::kError;
    p.error_code = StatusCode::kMismatch;
    p.error = *m;
    return p;
  }
  if (ref.type == OpType::kAllgather) {
    for (int r = 0; r < size_; ++r) {
      auto it = entry.by_rank.find(r);
      p.rank_dims.push_back(it == entry.by_rank.end() ? 0 : it->second.shapes.at(0).at(0));
    }
  } else if (ref.type == OpType::kReducescatter) {
    p.rank_dims = ref.splits;  // caller-given receive counts; empty: the even split
  } else if (ref.type == OpType::kAlltoall) {
    for (int r = 0; r < size_; ++r) {
      const auto& splits = entry.by_rank.at(r).splits;
      p.rank_dims.insert(p.rank_dims.end(), splits.begin(), splits.end());
    }
  }
  return p;
}

ResponseList Controller::respond(Clock::time_point now) {
  ResponseList out;
  out.evictions = std::move(evictions_);
  evictions_.clear();
  out.shutdown_rank = shutdown_rank_;

  std::vector<std::pair<uint64_t, std::string>> ready;
  for (const auto& [name, e] : table_) {
    bool complete = true;
    for (int r = 0; r < size_ && complete; ++r)
      complete = e.by_rank.count(r) > 0 || joined_.count(r) > 0;
    if (complete) ready.push_back({e.seq, name});
  }
  std::sort(ready.begin(), ready.end());
  for (const auto& [seq, name] : ready) {
    out.responses.push_back(build(name, table_.at(name)));
    table_.erase(name);
  }
  if (static_cast<int>(joined_.size()) == size_) {
    Response done;
    done.name = std::string(kJoinName);
    done.type = OpType::kJoin;
    done.root = last_joined_;  // join's result: the rank that joined last
    out.responses.push_back(done);
    joined_.clear();
  }
  out.joined.assign(joined_.begin(), joined_.end());
  inspect_stalls(now, out);
  inspect_mismatch(now, changed_ || !out.responses.empty(), out);
  changed_ = false;
  return out;
}

// Note [Mismatched collectives]
// Ranks blocked in different operations (rank 0 in broadcast 'x', rank 1 in barrier 'b') wait
// for each other forever: each operation completes only when every rank submits it. The table
// shows it: once every rank that has not joined has some name pending here and none of those
// names is complete (complete ones left the table in respond()), nothing can move until a rank
// submits something new. Each rank's requests reach the table: an uncached one at once, a
// cached one when it has waited half of KOLO_MISMATCH_TIME (Runtime::sort_pending), and a
// cached name a rank sends thus is evicted everywhere, so a peer's later submission of it comes
// here too. So when that state lasts KOLO_MISMATCH_TIME with nothing added (a request, a join)
// and nothing completed, every operation in the table fails with Mismatch on every rank,
// naming each rank's operations. A rank that is merely late (nothing pending) never trips it,
// and neither does one that submits again within the bound. What it cannot tell apart: a rank
// that computes with an operation outstanding for longer than the bound while its peers wait
// in another one it will submit afterwards; the bound (default 10 s) is chosen above that.
// A process set's Runtime has a Controller of its own, so each set is judged on its members; a
// point-to-point pair's turns it off (a send waits for a recv that may come much later).

bool Controller::every_rank_blocked() const {
  if (table_.empty() || static_cast<int>(joined_.size()) == size_) return false;
  std::set<int> waiting;
  for (const auto& [name, e] : table_)
    for (const auto& [r, q] : e.by_rank) waiting.insert(r);
  for (int r = 0; r < size_; ++r)
    if (!joined_.count(r) && !waiting.count(r)) return false;
  return true;
}

std::string Controller::pending_by_rank() const {
  std::vector<std::pair<uint64_t, const std::string*>> order;
  for (const auto& [name, e] : table_) order.push_back({e.seq, &name});
  std::sort(order.begin(), order.end());
  // Each rank's operations in the order they were first requested, at most a few; ranks that
  // wait in the same ones are named together, so a large job's message stays short.
  constexpr size_t kShown = 3;
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // (what, ranks)
  for (int r = 0; r < size_; ++r) {
    std::vector<std::string> mine;
    for (const auto& [seq, name] : order)
      if (auto it = table_.at(*name).by_rank.find(r); it != table_.at(*name).by_rank.end())
        mine.push_back(std::string(op_type_name(it->second.type)) + " '" + *name + "'");
    std::string s = joined_.count(r) ? "joined" : "";
    for (size_t i = 0; i < mine.size() && i < kShown; ++i)
      s += (i == 0 ? "" : i + 1 == mine.size() ? " and " : ", ") + mine[i];
    if (mine.size() > kShown) s += " and " + std::to_string(mine.size() - kShown) + " more";
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& p) { return p.first == s; });
    if (g == groups.end()) {
      groups.push_back({s, {}});
      g = std::prev(groups.end());
    }
    g->second.push_back(named(r));
  }
  std::string msg;
  for (const auto& [what, ranks] : groups) {
    const bool one = ranks.size() == 1;
    msg += (msg.empty() ? "" : "; ") +
           (one ? "rank " + std::to_string(ranks[0]) : "ranks " + rank_list(ranks)) +
           (what == "joined" ? (one ? " has joined" : " have joined")
                             : (one ? " waits in " : " wait in ") + what);
  }
  return msg;
}

void Controller::inspect_mismatch(Clock::time_point now, bool moved, ResponseList& out) {
  if (stall_.mismatch_time.count() <= 0 || !every_rank_blocked()) {
    blocked_since_.reset();
    return;
  }
  if (moved || !blocked_since_) {
    blocked_since_ = now;
    return;
  }
  const auto waited = std::chrono::duration_cast<std::chrono::nanoseconds>(now - *blocked_since_);
  if (waited < stall_.mismatch_time) return;
  const std::string msg =
      "mismatched collectives: " + pending_by_rank() +
      "; no operation is pending on every rank, and none moved for " + format_duration(waited) +
      " (KOLO_MISMATCH_TIME=" + format_duration(stall_.mismatch_time) +
      "): the ranks called different collectives, or the same ones in a different order and "
      "wait on them one by one";
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, e] : table_) order.push_back({e.seq, name});
  std::sort(order.begin(), order.end());
  for (const auto& [seq, name] : order) {
    const Request& ref = table_.at(name).by_rank.begin()->second;
    Response p;
    p.kind = Response::Kind::kError;
    p.name = name;
    p.type = ref.type;
    p.dtype = ref.dtype;
    p.device = ref.device;
    p.error_code = StatusCode::kMismatch;
    p.error = msg;
    out.responses.push_back(std::move(p));
  }
  table_.clear();
  blocked_since_.reset();
}

void Controller::inspect_stalls(Clock::time_point now, ResponseList& out) {
  if (stall_.check_time.count() <= 0) return;
  for (auto& [name, e] : table_) {
    auto waited = now - e.first_seen;
    bool warn = !e.warned && waited >= stall_.check_time;
    bool fail = stall_.shutdown_time.count() > 0 && waited >= stall_.shutdown_time;
    if (!warn && !fail) continue;
    std::vector<int> have, missing;
    for (int r = 0; r < size_; ++r)
      (e.by_rank.count(r) || joined_.count(r) ? have : missing).push_back(r);
    std::string msg =
        "stall: " + std::string(op_type_name(e.by_rank.begin()->second.type)) + " '" + name +
        "' was submitted by ranks " + named_list(have) + " " +
        format_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(waited)) +
        " ago and is still waiting for ranks " + named_list(missing) +
        " (a rank skipped this tensor, submitted it under another name, or is stuck)";
    if (warn) {
      e.warned = true;
      warnings_.push_back(msg);
    }
    if (fail && out.fatal.empty()) {
      out.fatal = msg + "; KOLO_STALL_SHUTDOWN_TIME (" + format_duration(stall_.shutdown_time) +
                  ") exceeded, failing the job";
      if (stall_.on_shutdown) stall_.on_shutdown(missing);
    }
  }
}

}  // namespace kolo::coord
