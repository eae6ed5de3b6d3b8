#include "backends/nccl/nccl_plan.h"

#include <algorithm>
#include <numeric>

namespace kolo::nccl {

namespace {

int64_t sum(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

bool all_equal(const std::vector<int64_t>& counts) {
  return std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
}

}  // namespace

RankPart plan_allreduce(int64_t count) { return {count == 0, true, count, count}; }

RankPart plan_allreduce_pieces(const std::vector<AllreducePiece>& pieces) {
  int64_t total = 0;
  for (const AllreducePiece& p : pieces) total += p.count;
  return plan_allreduce(total);
}

RankPart plan_allgather(const std::vector<int64_t>& counts, int rank) {
  const int64_t total = sum(counts);
  return {total == 0, all_equal(counts), counts[static_cast<size_t>(rank)], total};
}

RankPart plan_alltoall(const std::vector<int64_t>& send_counts,
                       const std::vector<int64_t>& recv_counts) {
  const int64_t sent = sum(send_counts), received = sum(recv_counts);
  return {sent == 0 && received == 0, false, sent, received};
}

RankPart plan_reducescatter(const std::vector<int64_t>& counts, int rank) {
  const int64_t total = sum(counts);
  return {total == 0, all_equal(counts), total, counts[static_cast<size_t>(rank)]};
}

}  // namespace kolo::nccl
