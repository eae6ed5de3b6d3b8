// ElasticDriver: kolorun's side of the elastic rendezvous (Note [Elastic rendezvous] in
// rendezvous/elastic_plan.h). It decides the generations of the world and nothing else: which
// processes run is the supervisor's business (elastic_supervisor.h), which tells the driver what
// it started and what it reaped, and asks it whether a host may get another worker.
//
// Note [kolorun's generations]
// Workers. Each is starting (kolorun spawned it, it is not in a plan yet), ready (it set
// ready_key: up and waiting to be named), member (named by a plan) or exited. The workers of
// generation 0 are members from the start: its plan is written before they run.
// Forming G+1. Its members are the live members of G in their rank order, then the ready
// workers by id. It is formed
//   - when a member of G ends other than by exiting 0 (failed, or stopped by kolorun when the
//     discovered slots shrank), at once: the survivors train again as soon as they re-join;
//   - on a re-form request of G (the counter at reform_key(G) above 0): a rank whose world broke
//     first. Requests of older generations are stale: the generation they ask for exists;
//   - when workers are ready to join: once no other worker is still starting, or the first ready
//     one has waited kJoinBatch, so that workers started together join in one generation.
// A generation smaller than --min-np is never formed: while enough workers live (replacements
// still starting), the driver waits for them to be ready.
// Ending. Fewer live workers than --min-np: kEndKey gets one message naming --min-np, the lost
// workers (every worker that failed, with the rank it last held) and the survivors, and nothing
// more is formed. Every rank's wait ends with it.
// Finishing. Once a member of the newest generation exits 0, the job is finishing: nothing more
// is formed or started, and the job succeeds when every member of that generation has exited 0.
// A member that fails meanwhile, or a re-form request, ends the job instead (a rank waiting for
// a new world would otherwise wait for one that never comes).
// Stuck. Rank 0 names the members its stall inspector gave up on (stuck_key(G): alive but not
// taking part); the driver hands them to the supervisor to stop (take_stuck(), SIGKILL) and
// leaves them out of the next generation, which it forms once they are reaped, as for any member
// that died. They count as failed.
// Blacklist. A host whose workers failed --blacklist-after times gets no new worker. Workers
// kolorun stopped itself, and those that exited 0, do not count.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kolo/status.h"
#include "rendezvous/elastic_plan.h"
#include "rendezvous/store.h"

namespace kolo::kolorun {

struct DriverOptions {
  int min_np = 1;
  int max_np = 1;
  int blacklist_after = 3;
  // Ready workers wait at most this long for workers started with them before joining alone.
  std::chrono::milliseconds join_batch{500};
};

enum class WorkerState { kStarting, kReady, kMember, kExited };

// Not thread-safe: one thread (the supervision loop) makes every call. The store must outlive
// the driver; store calls block for one round trip each.
class ElasticDriver {
 public:
  using Clock = std::chrono::steady_clock;

  ElasticDriver(Store& store, DriverOptions options);

  // Publishes generation 0, whose members are `workers` (id, host) in rank order: call before
  // they start. InvalidArgument from make_plan; the store's errors.
  Status start(const std::vector<std::pair<int64_t, std::string>>& workers);

  // A worker kolorun started after generation 0 (a replacement, a new slot): starting until its
  // ready key appears. Its id must be new.
  void add_worker(int64_t worker, std::string host);

  // The worker's process ended: `how` is exit_text() ("exited with status 1"); `clean`: it
  // exited 0; `stopped`: kolorun stopped it (fewer slots, the job's end), not a failure.
  void on_exit(int64_t worker, bool clean, std::string how, bool stopped);

  // Reads the ready keys of starting workers and the newest generation's re-form counter, then
  // forms a generation or ends the job as Note [kolorun's generations] says. Call every loop.
  // Errors: the store's (kolorun's own store lost); the driver's state is unchanged by them.
  Status step(Clock::time_point now);

  // Ends the job with `message` (kEndKey) unless it has ended: kolorun was interrupted, or its
  // store failed. The store's error, if writing fails.
  Status end(std::string message);

  // The members named stuck since the last call (Note [kolorun's generations]): the supervisor
  // stops them (SIGKILL). Each worker is handed over once.
  std::vector<int64_t> take_stuck();

  // Whether a new worker may start on `host`: not ended or finishing, fewer than --max-np live,
  // and the host not blacklisted.
  bool may_start_on(const std::string& host) const;
  bool blacklisted(const std::string& host) const;

  // The end message once the job has ended (fewer than --min-np, or end()); nullopt before.
  const std::optional<std::string>& end_message() const { return end_message_; }
  // A member of the newest generation exited 0 (Note [kolorun's generations]).
  bool finishing() const { return finishing_; }
  // Finishing and every member of the newest generation has exited.
  bool finished() const;
  // finished() and every member of the newest generation exited 0, and the job did not end.
  bool succeeded() const;
  // Workers not exited.
  int live_count() const;
  const elastic_protocol::Plan& plan() const { return plan_; }
  std::optional<WorkerState> state_of(int64_t worker) const;

 private:
  struct Worker {
    std::string host;
    WorkerState state = WorkerState::kStarting;
    std::optional<Clock::time_point> ready_since;
    bool clean = false;   // exited 0
    bool failed = false;  // exited otherwise, and not stopped by kolorun
    bool stuck = false;   // named by stuck_key: left out of the next generation
    std::string how;      // exit_text() once exited
    std::optional<std::pair<int64_t, int>> last_rank;  // (generation, rank) it last held
  };

  // Writes plan_key(G) for these workers, then raises kGenerationKey to G.
  Status publish(int64_t generation, const std::vector<std::pair<int64_t, std::string>>& workers);
  Status poll_store(Clock::time_point now);
  // Reads stuck_key of the newest generation, once it is there.
  Status poll_stuck();
  // The next generation's members: live members in rank order, then ready workers by id.
  std::vector<std::pair<int64_t, std::string>> candidates() const;
  bool joiners_due(Clock::time_point now) const;
  // "kolorun: 1 rank left, fewer than --min-np 2: lost worker 2 (...); survivors: ..."
  std::string min_np_message() const;
  // A member failed, or a rank asked to re-form, after another had exited 0.
  std::string finishing_message() const;
  // "rank 2 of generation 0", or "not yet a rank".
  std::string rank_text(const Worker& w) const;
  std::string lost_text() const;
  std::string survivors_text() const;

  Store& store_;
  const DriverOptions options_;
  std::map<int64_t, Worker> workers_;
  std::map<std::string, int> failures_on_;  // host -> failed workers
  elastic_protocol::Plan plan_;             // the newest generation's
  bool published_ = false;
  bool reform_due_ = false;       // a member of the newest generation died, or a rank asked
  int64_t stuck_read_ = -1;       // the generation whose stuck_key was read
  std::vector<int64_t> to_stop_;  // stuck members not yet taken by the supervisor
  bool finishing_ = false;
  std::optional<int64_t> finisher_;  // the member whose exit 0 started the finishing
  std::optional<std::string> end_message_;
};

// "worker 2 (rank 2 of generation 0, was killed by signal 9 (SIGKILL))" style lists: "a", "a and
// b", "a, b and c".
std::string join_and(const std::vector<std::string>& items);

}  // namespace kolo::kolorun
