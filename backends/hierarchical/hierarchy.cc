#include "backends/hierarchical/hierarchy.h"

#include <algorithm>
#include <map>
#include <string>

namespace kolo {

namespace {

std::string describe_host(int host, const std::vector<int>& ranks) {
  std::string out = "host " + std::to_string(host) + " has " + std::to_string(ranks.size()) +
                    (ranks.size() == 1 ? " (rank " : " (ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return out + ")";
}

}  // namespace

Result<Hierarchy> plan_hierarchy(const std::vector<int>& host_of, int rank) {
  const int size = static_cast<int>(host_of.size());
  if (rank < 0 || rank >= size)
    return Status::InvalidArgument("plan_hierarchy: rank must be in [0, " + std::to_string(size) +
                                   "), got " + std::to_string(rank));
  // Ranks by host, each list ascending since r ascends.
  std::map<int, std::vector<int>> hosts;
  for (int r = 0; r < size; ++r) hosts[host_of[r]].push_back(r);
  const size_t per_host = hosts.begin()->second.size();
  if (std::any_of(hosts.begin(), hosts.end(),
                  [&](const auto& h) { return h.second.size() != per_host; })) {
    std::string what = "hosts hold different numbers of ranks: ";
    for (auto it = hosts.begin(); it != hosts.end(); ++it)
      what += (it == hosts.begin() ? "" : ", ") + describe_host(it->first, it->second);
    return Status::InvalidArgument(what);
  }
  Hierarchy h;
  h.intra_ranks = hosts.at(host_of[rank]);
  h.intra_rank = static_cast<int>(std::find(h.intra_ranks.begin(), h.intra_ranks.end(), rank) -
                                  h.intra_ranks.begin());
  for (const auto& [host, ranks] : hosts) h.cross_ranks.push_back(ranks[h.intra_rank]);
  std::sort(h.cross_ranks.begin(), h.cross_ranks.end());
  h.cross_rank = static_cast<int>(std::find(h.cross_ranks.begin(), h.cross_ranks.end(), rank) -
                                  h.cross_ranks.begin());
  return h;
}

}  // namespace kolo
