// Runtime: one rank's Kolo engine: the submission queue, the background thread, negotiation
// with rank 0 over a control backend, the response cache, fusion and execution on a data
// backend. kolo::init() builds one from the environment; tests build several in one process
// (one per thread-rank) from in-process backends.
//
// See Note [Cycle] in runtime.cc for how ranks stay in step.
//
// Thread-safety: submit(), shutdown() and the accessors may be called from any thread. Only
// the thread that holds the cycle turn touches the backends and the negotiation state: the
// background thread, or a thread waiting in a blocking call (Note [Waiter drives] in runtime.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backends/backend.h"
#include "backends/device_backend.h"
#include "common/thread_annotations.h"
#include "coordinator/autotune.h"
#include "coordinator/config.h"
#include "coordinator/controller.h"
#include "coordinator/entry.h"
#include "coordinator/executor.h"
#include "coordinator/response_cache.h"
#include "timeline/timeline.h"

namespace kolo::coord {

struct Topology {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
};

// KOLO_TIMELINE's file for one rank: "{rank}" in the path is replaced by the rank; otherwise
// a job of several ranks writes "<stem>.rank<N>.json" (or .json.gz, .gz: one file per rank, as
// kolo-trace merge expects) and a single rank writes the path as given.
std::string timeline_path_for_rank(const std::string& path, int rank, int size);

// Where a Runtime records. The global set's Runtime has a timeline of its own (KOLO_TIMELINE,
// kolo::start_timeline: one file per rank), which it alone starts, stops and marks cycles on.
// A process set's or a point-to-point pair's records its operations on the global set's, on
// rows of its own named "<prefix><tensor>" (Runtime::timeline_rows), so that the rank's one
// file holds every operation and each row says which set it belongs to.
struct TimelineRows {
  std::shared_ptr<Timeline> shared;  // null: a timeline of its own
  std::string prefix;                // "" for the global set, "set 1: ", "pair 0-3: "
};

class Runtime {
 public:
  // `data` runs the collectives; `control` carries negotiation (allreduce of the cache bit
  // vector, allgather of request lists, broadcast of responses). Both must span the same
  // ranks as `topology`. Starts the timeline when config.timeline_path is set (IoError
  // when it cannot be opened) and the background thread.
  // `gpu` (optional, KOLO_GPU_OPERATIONS) runs the collectives on CUDA tensors instead of
  // `data` (Executor); when the runtime fails, a DeviceBackend among them is aborted with the
  // failure, so that its pending GPU operations fail with it instead of hanging.
  // `rows`: a set's or pair's Runtime records on the global set's timeline (TimelineRows).
  static Result<std::unique_ptr<Runtime>> create(RuntimeConfig config, Topology topology,
                                                 std::unique_ptr<Backend> data,
                                                 std::unique_ptr<Backend> control,
                                                 std::unique_ptr<Backend> gpu = nullptr,
                                                 TimelineRows rows = {});
  ~Runtime();  // shutdown()

  // Validates the entry against this rank's state (not shut down, not failed, name not in
  // flight, not joined) and queues it. Always returns a handle; a rejected entry's handle
  // has already failed.
  Handle submit(std::unique_ptr<Entry> entry);
  // See kolo::shutdown(). Idempotent.
  Status shutdown();

  // Starts recording this rank's timeline at timeline_path_for_rank(path, rank, size): the
  // file rule of KOLO_TIMELINE, applied here for create() and kolo::start_timeline() alike.
  // Errors as Timeline::start (PreconditionFailed when already recording).
  Status start_timeline(const std::string& path, bool mark_cycles);

  // See kolo::mark_step(). Any thread. A "STEP" marker on the timeline starts each step.
  void mark_step();
  int64_t steps_marked() const { return steps_marked_.load(std::memory_order_relaxed); }

  // The autotuner's configurations applied on this rank, in order (Note [Autotune]); the
  // same list on every rank. Any thread.
  struct AppliedTuning {
    int64_t cycle = 0;      // the background cycle that applied it (same on every rank)
    TuneDecision decision;  // apply_step: the first step that uses its bucket size
    // Allreduces run hierarchically from this cycle on (KOLO_HIERARCHICAL_ALLREDUCE; false
    // where the data plane has no hierarchy), whether or not the tuner searches it.
    bool hierarchical = false;
  };
  std::vector<AppliedTuning> applied_tunings() const;
  // The tuned gradient bucket size for the step after steps_marked() steps; nullopt before the
  // autotuner's first change (or without it). Any thread.
  std::optional<int64_t> tuned_bucket_bytes() const;

  const Topology& topology() const { return topology_; }
  const RuntimeConfig& config() const { return config_; }
  Timeline& timeline() { return *timeline_; }
  // Rows on this Runtime's timeline for another Runtime (a process set's, a pair's): "<prefix>
  // <tensor>". The prefix must be the same on every rank for the rows to match across files.
  TimelineRows timeline_rows(std::string prefix) const { return {timeline_, std::move(prefix)}; }
  std::string backend_name() const { return std::string(data_->name()); }
  // Stall warnings rank 0 has issued so far (also logged at warning level).
  std::vector<std::string> stall_warnings() const;
  // Ok while this Runtime accepts submissions; afterwards why they fail (the failure that
  // stopped it, or its shutdown). Any thread.
  Status failure() const;
  // Cycles started so far by threads waiting in blocking calls instead of the background thread
  // (Note [Waiter drives]). Any thread.
  int64_t cycles_run_by_callers() const { return caller_cycles_.load(std::memory_order_relaxed); }

 private:
  Runtime(RuntimeConfig config, Topology topology, std::unique_ptr<Backend> data,
          std::unique_ptr<Backend> control, std::unique_ptr<Backend> gpu, TimelineRows rows);
  // Who runs cycles now (Note [Waiter drives]): whoever holds the turn alone touches the
  // turn-confined state below (pending_ and the rest), and takes and gives it under mu_.
  enum class Turn { kNone, kBackground, kCaller };
  class Gate;  // the CycleDriver of blocking calls' operations; may outlive the Runtime

  // The background loop stopped with `why`: fail everything, the GPU backend's work included.
  void fail_all_and_abort(const Status& why);
  // The background loop's end after a failure (the link measurement's included): names the
  // job's first failure (RuntimeConfig::name_first_failure), logs, then fail_all_and_abort.
  void stop_after_failure(Status st);
  void loop();
  // The background thread's wait between two of its cycles: gives the turn up, runs deferred
  // callbacks, and takes the turn back when there is work (or a heartbeat is due) and no
  // caller drives. False once the loop has ended (a driving caller stopped it).
  bool await_turn(bool idle, bool& shutdown_requested);
  // A caller waiting on `op` runs cycles until it settles, when the turn is free.
  void drive(const detail::OpState& op);
  // The turn's holder: moves the submission queue into pending_.
  void take_queue() KOLO_REQUIRES(mu_);
  // Turn free: something for the background thread to run a cycle for.
  bool work_for_background() const KOLO_REQUIRES(mu_);
  // A driving caller, before a cycle that follows another: the batching window, so that close
  // submissions share a cycle; then takes the queue. False (the caller stops driving) once a
  // device operation was submitted.
  bool caller_may_continue(bool& shutdown_requested);
  // The turn's holder: one cycle, with the QUEUE spans ended before it and any exception
  // turned into a Status (a non-OK one is fatal for this runtime).
  Status run_cycle(bool shutdown_requested, bool& stop);
  // The turn's holder, once a cycle failed (`st`) or shut the runtime down: fails what is
  // left on failure, then ends the loop for every thread.
  void end_loop(const Status& st);
  // Callbacks of completions that a driving caller ran (background thread).
  void run_deferred_callbacks();
  // Before sleeping idle: briefly watch for a submission (a quick resubmission then costs
  // no wake-up).
  void spin_for_submission();
  // One negotiation + execution cycle. A non-OK Status is fatal for this runtime.
  Status cycle(bool shutdown_requested, bool& stop);
  // cycle()'s steps. Step 1's bit vector of bits_[0, nbits): sets the bits of pending requests
  // that match the response cache (in cached_) and returns the others (submission order,
  // entry), which take the slow path.
  std::vector<std::pair<uint64_t, Entry*>> sort_pending(size_t nbits,
                                                        std::chrono::steady_clock::time_point now);
  // Step 1 itself: the minimum of every rank's bits in bits_[0, nbits).
  Status exchange_bits(size_t nbits);
  // Step 2, when some rank needs it: sends `slow` and this rank's flags, adopts the response
  // list's evictions, tuning and joined ranks, and appends its responses to `responses`.
  Status run_slow_path(std::vector<std::pair<uint64_t, Entry*>> slow, bool shutdown_requested,
                       ResponseList& list, std::vector<Response>& responses);
  // After execution: the tuner's observation, then what the response list said of the job (a
  // fatal error, a rank's shutdown, which stops this runtime).
  Status end_cycle(const ResponseList& list, const std::vector<Response>& responses, bool& stop);
  Status negotiate_slow(const RequestList& mine, ResponseList& out);
  // Step 1 as an allgather with piggy-backed data (piggyback.cc, Note [Piggy-back]): leaves
  // the element-wise minimum of every rank's bits in bits_[0, nbits) and has already run
  // (and cleared the bits of) the allreduces whose data every rank sent along.
  Status gather_bits(size_t nbits);
  Status execute(const std::vector<Response>& responses);
  // The entries (null for a joined rank) of responses about to run; frees their names.
  std::vector<BatchItem> claim(const std::vector<const Response*>& responses);
  // After running: updates the response cache and forgets the entries.
  void retire(const std::vector<BatchItem>& items);
  void end_negotiate_spans(const std::vector<BatchItem>& items);
  void fail_all(const Status& status);
  // What the operations still pending end with when rank `rank` shut the session down.
  std::string shutdown_message(int rank);
  // What happened to `rank`, which closed this Runtime, when it left without kolo::shutdown()
  // and this rank has operations to fail (config_.describe_departure); nullopt otherwise.
  std::optional<std::string> departure_of(int rank);
  // Every rank, in the same cycle: adopts the autotuner's decision. Internal when it names a
  // categorical knob this rank cannot switch (the job then fails: ranks would diverge).
  Status apply_tuning(const TuneDecision& d);
  // Every rank, before the first cycle, when autotuning: a few timed allreduces on the data
  // backend, for the tuner's prior (rank 0 keeps the result).
  Status measure_link();
  void end_queue_span(Entry& entry);
  // The operation's span and its QUEUE phase, at submission (timeline recording).
  void trace_submission(Entry& entry);
  // Args of this Runtime's markers (stall warnings, failures): its set, when not the global.
  TimelineArgs marker_args(TimelineArgs args) const;

  const RuntimeConfig config_;
  const Topology topology_;
  // Its own (the global set's; a SIGTERM from kolorun or Ctrl-C closes the file in order
  // before the process ends) or the global set's, shared with it. Declared before gpu_, which
  // outlives it otherwise: the device backend's destructor runs the last completions, which
  // end their operations' spans.
  const bool owns_timeline_;  // (before timeline_, which takes TimelineRows::shared over)
  const std::shared_ptr<Timeline> timeline_;
  const std::string rows_;  // TimelineRows::prefix
  std::unique_ptr<Backend> data_;
  std::unique_ptr<Backend> control_;
  std::unique_ptr<Backend> gpu_;     // may be null; declared before executor_, which borrows it
  DeviceBackend* device_ = nullptr;  // gpu_ when it is a DeviceBackend (nccl)

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Entry>> queue_ KOLO_GUARDED_BY(mu_);
  std::unordered_set<std::string> in_flight_ KOLO_GUARDED_BY(mu_);
  bool shutdown_requested_ KOLO_GUARDED_BY(mu_) = false;
  bool stopped_ KOLO_GUARDED_BY(mu_) = false;  // no more submissions
  Status final_status_ KOLO_GUARDED_BY(mu_);   // why submissions now fail
  bool joined_locally_ KOLO_GUARDED_BY(mu_) = false;
  std::vector<std::string> stall_warnings_ KOLO_GUARDED_BY(mu_);
  bool sleeping_ KOLO_GUARDED_BY(mu_) = false;  // loop waits on cv_ for work
  // The loop holds the turn until its first wait (the link measurement runs before it).
  Turn turn_ KOLO_GUARDED_BY(mu_) = Turn::kBackground;
  bool loop_ended_ KOLO_GUARDED_BY(mu_) = false;  // no more cycles, by any thread
  // Callers may drive: no device backend, and no device operation submitted so far.
  bool drivable_ KOLO_GUARDED_BY(mu_) = false;
  // Callbacks of operations a driving caller completed, for the background thread to run.
  std::vector<std::function<void()>> deferred_ KOLO_GUARDED_BY(mu_);
  std::shared_ptr<Gate> gate_;
  std::atomic<size_t> queued_{0};          // queue_.size(), readable without mu_
  std::atomic<int64_t> steps_marked_{0};   // kolo::mark_step() calls so far
  std::atomic<int64_t> caller_cycles_{0};  // cycles_run_by_callers()
  std::vector<AppliedTuning> applied_ KOLO_GUARDED_BY(mu_);
  // Rank 0 with a tuner: the times of step boundaries not yet seen by the tuner.
  std::vector<std::chrono::steady_clock::time_point> marks_ KOLO_GUARDED_BY(mu_);

  // The turn's holder only. Hashed by name: an operation is found by name three times on its
  // way through (nothing iterates them in an order that matters: the slow path sorts by
  // Entry::seq, the fast path by cache slot).
  std::unordered_map<std::string, std::unique_ptr<Entry>> pending_;
  uint64_t next_seq_ = 0;
  bool join_to_send_ = false;
  std::vector<int32_t> joined_ranks_;  // as of the last response list
  ResponseCache cache_;
  std::unique_ptr<Controller> controller_;  // rank 0 only
  std::unique_ptr<Tuner> tuner_;            // rank 0 with KOLO_AUTOTUNE only
  // The tunable knobs' current values (config_ holds the initial ones).
  uint64_t fusion_threshold_;
  std::chrono::nanoseconds cycle_time_;
  int64_t cycles_ = 0;
  std::chrono::steady_clock::time_point last_inspection_;
  Executor executor_;
  std::vector<uint8_t> bits_;
  // Note [Piggy-back]: step 1 gathers every rank's bits and small data instead of
  // allreducing the bits. Fixed at construction (every rank decides alike).
  const bool gather_control_;
  std::vector<std::pair<size_t, Entry*>> cached_;  // this cycle's cache hits: slot, entry
  std::vector<uint64_t> gathered_;                 // every rank's message, 8-byte aligned
  std::vector<int64_t> gather_counts_;
  bool idle_peer_ = false;  // last gathered cycle: some rank had nothing pending
  std::chrono::steady_clock::time_point last_start_;  // of the last cycle

  std::thread thread_;
};

}  // namespace kolo::coord
