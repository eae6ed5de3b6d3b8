// Process sets across an elastic job's re-forming of the world (coordinator/elastic_hooks.h).
//
// Note [Elastic process sets]
// A process set outlives a re-forming of the world when all its members do: the same id, its
// members renumbered to their ranks in the new world, and the ProcessSet objects the program
// holds (which name the former ranks) still work. A set that lost a member is closed: its
// operations fail with PreconditionFailed naming the set and the lost worker, and the program adds a
// new one if it wants. Rank 0 of the new world, which was a member of the old one (survivors
// keep their order, new workers come last: make_plan), says which sets there were, so that a
// new worker carries them too. Sets that KOLO_PROCESS_SETS re-created in init() stay as they are.

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/elastic_hooks.h"
#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace kolo::detail {

// One line per set: "<id> <former ranks> <member workers>", each list comma-separated.
std::string describe_process_sets() {
  const std::vector<int64_t> workers = kolo::detail::elastic_workers();
  std::ostringstream out;
  for (const ProcessSet& set : process_sets()) {
    if (set.is_global()) continue;
    out << set.id();
    std::string sep = " ";
    for (int r : set.ranks()) out << std::exchange(sep, ",") << r;
    sep = " ";
    for (int r : set.ranks()) out << std::exchange(sep, ",") << workers.at(r);
    out << "\n";
  }
  return out.str();
}

namespace {

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// One carried set on this rank: re-created when every member survived, else closed.
Status carry_set(int32_t id, const std::vector<int>& former, const std::vector<int64_t>& members,
                 const std::vector<int64_t>& workers) {
  std::vector<int> ranks;
  for (size_t i = 0; i < members.size(); ++i) {
    auto at = std::find(workers.begin(), workers.end(), members[i]);
    if (at == workers.end())
      return kolo::detail::close_process_set(
          id, former,
          "process set " + std::to_string(id) + " lost its member worker " +
              std::to_string(members[i]) + " (rank " + std::to_string(former[i]) +
              ") when the world was re-formed as generation " +
              std::to_string(elastic::generation()) +
              "; add a new set with kolo::add_process_set()");
    ranks.push_back(static_cast<int>(at - workers.begin()));
  }
  std::sort(ranks.begin(), ranks.end());
  return kolo::detail::carry_process_set(id, ranks, former).status();
}

}  // namespace

Status carry_process_sets(const std::string& described) {
  KOLO_ASSIGN_OR_RETURN(std::string sets, broadcast_object("elastic.process_sets", described));
  const std::vector<int64_t> workers = kolo::detail::elastic_workers();
  std::vector<int32_t> present;
  for (const ProcessSet& set : process_sets()) present.push_back(set.id());
  std::istringstream lines(sets);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    int32_t id = 0;
    std::string former, members;
    fields >> id >> former >> members;
    if (std::find(present.begin(), present.end(), id) != present.end()) continue;
    std::vector<int> ranks;
    for (int64_t r : numbers(former)) ranks.push_back(static_cast<int>(r));
    KOLO_RETURN_IF_ERROR(carry_set(id, ranks, numbers(members), workers));
  }
  return Status::Ok();
}

}  // namespace kolo::detail
