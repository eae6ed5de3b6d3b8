#include "backends/hierarchical/hierarchy.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

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
  h.host_index.resize(static_cast<size_t>(size));
  for (const auto& [host, ranks] : hosts) {
    for (int r : ranks) h.host_index[static_cast<size_t>(r)] = static_cast<int>(h.hosts.size());
    h.hosts.push_back(ranks);
  }
  return h;
}

namespace {

// Shard j of a block of `total` elements cut into `parts`: {offset, count}.
std::pair<int64_t, int64_t> shard(int64_t total, int64_t parts, int64_t j) {
  const int64_t base = total / parts, extra = total % parts;
  return {j * base + std::min(j, extra), base + (j < extra ? 1 : 0)};
}

}  // namespace

AllgatherPlan plan_allgather(const Hierarchy& h, int rank, const std::vector<int64_t>& counts) {
  const size_t hosts = h.hosts.size(), per_host = h.hosts.front().size();
  const int64_t parts = static_cast<int64_t>(per_host);
  std::vector<int64_t> displ(counts.size() + 1, 0);  // world rank order: the output's layout
  for (size_t r = 0; r < counts.size(); ++r) displ[r + 1] = displ[r] + counts[r];
  std::vector<int64_t> host_total(hosts, 0);
  for (size_t k = 0; k < hosts; ++k)
    for (int r : h.hosts[k]) host_total[k] += counts[static_cast<size_t>(r)];
  // The cross order of position j: its ranks ascending, as the cross group numbers them.
  auto cross_order = [&](size_t j) {
    std::vector<int> ranks;
    for (const auto& host : h.hosts) ranks.push_back(host[j]);
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  };

  AllgatherPlan p;
  const size_t me_host = static_cast<size_t>(h.host_index[static_cast<size_t>(rank)]);
  const int64_t position = h.intra_rank;
  for (int r : h.hosts[me_host]) p.host_counts.push_back(counts[static_cast<size_t>(r)]);
  p.host_total = host_total[me_host];
  std::tie(p.shard_offset, p.shard_count) = shard(p.host_total, parts, position);
  for (int r : cross_order(static_cast<size_t>(position)))
    p.cross_counts.push_back(
        shard(host_total[static_cast<size_t>(h.host_index[static_cast<size_t>(r)])], parts,
              position)
            .second);
  for (int64_t c : p.cross_counts) p.cross_total += c;

  int64_t from = 0;
  for (size_t j = 0; j < per_host; ++j) {
    int64_t contributed = 0;
    for (int r : cross_order(j)) {
      const size_t k = static_cast<size_t>(h.host_index[static_cast<size_t>(r)]);
      const auto [offset, count] = shard(host_total[k], parts, static_cast<int64_t>(j));
      // The shard [offset, offset + count) of host k's block, over its ranks' blocks.
      int64_t block_start = 0;
      for (int owner : h.hosts[k]) {
        const int64_t block = counts[static_cast<size_t>(owner)];
        const int64_t lo = std::max(offset, block_start);
        const int64_t hi = std::min(offset + count, block_start + block);
        if (lo < hi) {
          const AllgatherPlan::Run run{from + (lo - offset),
                                       displ[static_cast<size_t>(owner)] + (lo - block_start),
                                       hi - lo};
          if (!p.unpack.empty() && p.unpack.back().from + p.unpack.back().count == run.from &&
              p.unpack.back().to + p.unpack.back().count == run.to)
            p.unpack.back().count += run.count;
          else
            p.unpack.push_back(run);
        }
        block_start += block;
      }
      from += count;
      contributed += count;
    }
    p.gather_counts.push_back(contributed);
  }
  p.total = from;
  return p;
}

}  // namespace kolo
