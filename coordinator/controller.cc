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
  if (!joined_.empty()) {
    std::vector<int> joined(joined_.begin(), joined_.end());
    if (ref.type == OpType::kAlltoall || ref.type == OpType::kReducescatter)
      return what + ": cannot run while ranks " + named_list(joined) +
             " have joined (join supports allreduce, allgather, broadcast and barrier)";
    if (ref.type == OpType::kBroadcast && joined_.count(ref.root) &&
        entry.by_rank.count(ref.root) == 0)
      return what + ": root rank " + std::to_string(named(ref.root)) + " has joined";
  }
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
  return out;
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
