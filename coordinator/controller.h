// Controller: the coordinator's message table, run on rank 0 only.
//
// Each slow-path cycle, every rank's RequestList is add()ed; respond() then returns, in the
// order in which names were first requested, a Response for every name that all ranks have
// submitted (a joined rank counts as having submitted everything). Requests that disagree
// become error Responses naming the tensor, the ranks and what differs. Names that wait too
// long are reported by the stall inspector. When every rank has waited too long in operations
// that no other rank submitted, those operations fail on every rank (Note [Mismatched
// collectives] in controller.cc).
//
// Not thread-safe: owned by rank 0's cycle thread (Note [Waiter drives] in runtime.cc). Pure
// logic: no I/O, so unit tests drive it directly.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/message.h"
#include "coordinator/response_cache.h"

namespace kolo::coord {

struct StallConfig {
  std::chrono::nanoseconds check_time{std::chrono::seconds(60)};  // 0: never warn
  std::chrono::nanoseconds shutdown_time{0};                      // 0: never fail the job
  // Called once, with the ranks the operation still waited for, when the shutdown time passes
  // (an elastic job names them to kolorun, which stops them: Note [Elastic rendezvous]).
  std::function<void(const std::vector<int>& stuck)> on_shutdown;
  // Every rank (not joined) blocked in operations pending on no other rank this long, with no
  // progress meanwhile: they fail with Mismatch (Note [Mismatched collectives]); 0: never.
  std::chrono::nanoseconds mismatch_time{0};
};

class Controller {
 public:
  using Clock = std::chrono::steady_clock;

  // `rank_names`: how messages name each rank (rank_names[r] for rank r, roots included),
  // e.g. the job's ranks of a point-to-point pair; empty: ranks are named by their number.
  Controller(int size, StallConfig stall, std::vector<int> rank_names = {})
      : size_(size), stall_(stall), rank_names_(std::move(rank_names)) {}

  // Records one rank's requests. Names already in `cache` are scheduled for eviction: the
  // sender's parameters changed (or it was demoted to the slow path), so every rank must
  // re-negotiate that name.
  void add(int rank, const RequestList& list, const ResponseCache& cache, Clock::time_point now);
  // The responses that are ready, plus this cycle's evictions, shutdown and join state.
  ResponseList respond(Clock::time_point now);
  // Stall warnings produced by the last respond() (already logged by the caller's choice).
  std::vector<std::string> take_warnings() { return std::move(warnings_); }

  size_t pending() const { return table_.size(); }

 private:
  struct Entry {
    uint64_t seq;
    Clock::time_point first_seen;
    std::map<int, Request> by_rank;
    bool warned = false;
  };
  Response build(const std::string& name, const Entry& entry) const;
  std::optional<std::string> mismatch(const std::string& name, const Entry& entry) const;
  void inspect_stalls(Clock::time_point now, ResponseList& out);
  // Note [Mismatched collectives]. `moved`: this cycle completed or added something.
  void inspect_mismatch(Clock::time_point now, bool moved, ResponseList& out);
  // Every rank that has not joined has a name in the table (none is complete there).
  bool every_rank_blocked() const;
  // "rank 0 waits in broadcast 'x'; rank 1 waits in barrier 'b'; rank 2 has joined".
  std::string pending_by_rank() const;
  int named(int rank) const;
  std::string named_list(const std::vector<int>& ranks) const;

  int size_;
  StallConfig stall_;
  std::vector<int> rank_names_;
  std::map<std::string, Entry> table_;
  uint64_t next_seq_ = 0;
  std::set<int> joined_;
  int last_joined_ = -1;  // the rank whose join arrived last (join's response carries it)
  std::vector<std::string> evictions_;
  int32_t shutdown_rank_ = -1;
  std::vector<std::string> warnings_;
  bool changed_ = false;  // add() brought a request or a join since the last respond()
  std::optional<Clock::time_point> blocked_since_;  // every rank blocked, nothing moved since
};

// "[0, 2, 3]"
std::string rank_list(const std::vector<int>& ranks);
// "rank 0 has 4; ranks [1, 2] have 5": each distinct value once with the ranks that hold it, in
// order of first appearance. `values`: (rank, value) pairs.
std::string values_by_rank(const std::vector<std::pair<int, std::string>>& values);

}  // namespace kolo::coord
