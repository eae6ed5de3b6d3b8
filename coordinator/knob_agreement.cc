#include "coordinator/knob_agreement.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "coordinator/controller.h"

namespace kolo::coord {

namespace {

struct Value {
  std::string canonical;  // compared
  std::string shown;      // named in the verdict
};

// name -> value; nullopt when the message does not parse.
std::optional<std::map<std::string, Value>> parse_message(const std::string& message) {
  std::map<std::string, Value> values;
  std::istringstream in(message);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find('\t');
    const size_t b = a == std::string::npos ? a : line.find('\t', a + 1);
    if (b == std::string::npos) return std::nullopt;
    values[line.substr(0, a)] = {line.substr(a + 1, b - a - 1), line.substr(b + 1)};
  }
  return values;
}

}  // namespace

std::string job_knobs_message(const KnobSet& knobs,
                              const std::vector<std::pair<KnobId, std::string>>& effective) {
  std::string message;
  for (const Knob& k : all_knobs()) {
    if (k.scope != KnobScope::kJob) continue;
    // A backend's rows (KOLO_TCP_MAX_FRAME) have no KnobId: read by the row itself.
    std::string canonical = knobs.canonical(k);
    std::string shown = knobs.raw(k).empty() ? "(unset)" : knobs.raw(k);
    for (const auto& [id, value] : effective) {
      if (k.id != KnobId::kCount && id == k.id) canonical = shown = value;
    }
    if (!knobs.is_set(k)) shown += " (default)";
    message += std::string(k.name) + "\t" + canonical + "\t" + shown + "\n";
  }
  return message;
}

std::string knob_disagreement(const std::vector<std::string>& by_rank) {
  std::vector<std::map<std::string, Value>> parsed;
  std::vector<int> unreadable;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    auto values = parse_message(by_rank[r]);
    if (!values) unreadable.push_back(static_cast<int>(r));
    parsed.push_back(values.value_or(std::map<std::string, Value>{}));
  }
  if (!unreadable.empty())
    return std::string("the job-wide settings of ")
        .append(unreadable.size() == 1 ? "rank " : "ranks ")
        .append(unreadable.size() == 1 ? std::to_string(unreadable[0]) : rank_list(unreadable))
        .append(" cannot be read (another Kolo version?)");
  // Every name any rank sent, in the registry's order where known (so the verdict reads like
  // the README's table); a name only some ranks know is a difference too ("(not a knob)").
  std::vector<std::string> names;
  for (const Knob& k : all_knobs()) names.emplace_back(k.name);
  for (const auto& values : parsed)
    for (const auto& [name, v] : values)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  std::string verdict;
  for (const std::string& name : names) {
    std::vector<std::pair<int, std::string>> shown;
    std::set<std::string> canonical;
    bool sent = false;  // kRank knobs are in no message: nothing to compare
    for (size_t r = 0; r < parsed.size(); ++r) {
      auto it = parsed[r].find(name);
      sent |= it != parsed[r].end();
      canonical.insert(it == parsed[r].end() ? std::string("\x01") : it->second.canonical);
      shown.emplace_back(static_cast<int>(r), it == parsed[r].end()
                                                  ? std::string("(not a job-wide knob there)")
                                                  : it->second.shown);
    }
    if (!sent || canonical.size() == 1) continue;
    if (!verdict.empty()) verdict += "; ";
    verdict.append(name).append(" differs between ranks (").append(values_by_rank(shown)) += ')';
  }
  if (verdict.empty()) return verdict;
  return verdict + ": these settings must be the same on every rank";
}

Status agree_on_job_knobs(Store& store, const std::string& prefix, int rank, int size,
                          const std::string& message, std::chrono::milliseconds timeout) {
  const std::string key = prefix + "/knobs/";
  KOLO_RETURN_IF_ERROR(store.set(key + std::to_string(rank), message));
  std::string verdict;
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(key + std::to_string(r));
    Status waited = store.wait(keys, timeout);
    // Not a timeout: the wait itself ended, e.g. an elastic generation superseded (Note [Elastic
    // rendezvous]); the other ranks' waits end the same way.
    if (!waited.ok() && waited.code() != StatusCode::kTimeout) return waited;
    if (!waited.ok()) {
      verdict = std::string("not every rank reached kolo::init() within ")
                    .append(std::to_string(timeout.count()))
                    .append(" ms to compare the job-wide settings: ")
                    .append(waited.message());
    } else {
      std::vector<std::string> by_rank;
      for (const std::string& k : keys) {
        KOLO_ASSIGN_OR_RETURN(std::string m, store.get(k, timeout));
        by_rank.push_back(std::move(m));
      }
      verdict = knob_disagreement(by_rank);
    }
    // A leading byte says what follows ('v': the verdict, empty when the ranks agree; 't': a
    // timeout), since not every store keeps an empty value apart from a missing one.
    KOLO_RETURN_IF_ERROR(
        store.set(key + "verdict", std::string(waited.ok() ? "v" : "t").append(verdict)));
    if (!waited.ok()) return Status::Timeout(verdict);
  } else {
    // Rank 0 may itself come up to `timeout` after this rank, then wait `timeout` for the rest.
    Result<std::string> got = store.get(key + "verdict", 2 * timeout);
    if (!got.ok())
      return got.status().with_context("rank 0 gave no verdict on the job-wide settings");
    verdict = got->substr(1);
    if (got->starts_with("t")) return Status::Timeout(verdict);
  }
  if (verdict.empty()) return Status::Ok();
  return Status::InvalidArgument(verdict);
}

}  // namespace kolo::coord
