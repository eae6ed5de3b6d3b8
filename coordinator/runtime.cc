#include "coordinator/runtime.h"

#include <algorithm>
#include <functional>

#include "backends/hierarchical/hierarchical_backend.h"
#include "common/logging.h"
#include "common/text.h"
#include "coordinator/fusion.h"
#include "kolo/units.h"
#include "timeline/trace_format.h"

// Note [Cycle]
// Every rank's background thread (or a thread in a blocking call: Note [Waiter drives]) runs
// the same sequence of cycles; each cycle is a fixed series of control-plane collectives, so
// the ranks stay in step without a separate clock:
//   1. allreduce(min) of a byte vector: byte 0 is >= 1 when this rank needs no slow path;
//      byte 1+s is 1 when this rank has a pending request matching cache slot s. (In small
//      jobs an allgather of the vector instead, with small allreduces' data riding along:
//      Note [Piggy-back] in piggyback.cc.)
//   2. only when some byte 0 was 0: allgather of every rank's serialized RequestList, rank 0
//      (the Controller) decides, broadcast of the serialized ResponseList.
// Bits set on every rank are responses rebuilt from the (identical) caches; together with the
// slow-path responses they form the ordered list every rank executes.
// When does a rank enter a cycle? When it has pending work (at most once per cycle time,
// the batching window; at once when the gathered step 1 showed a rank with nothing pending,
// since that rank's next cycle starts with its next submission), when a submission arrives
// while it was idle (at once: no fixed sleep on the hot path), and at least once per
// heartbeat while idle. A rank with work blocks in step 1 until every other rank enters; an
// idle rank first watches its queue for a few microseconds (a caller that waited on a handle
// resubmits right away), then sleeps on its condition variable, so an idle job costs one tiny
// collective per heartbeat. The heartbeat keeps rank 0's stall inspector and shutdown
// requests moving while some ranks have nothing to do.

namespace kolo::coord {

namespace {

// The run-time switch of categorical tunable `id` (Note [Autotune]) in the data plane `data`,
// which takes a choice index; null when this job's data plane cannot switch it. One case per
// categorical knob of the registry. Called by the turn's holder only, which alone touches
// the data plane, between two cycles' collectives: a switch never meets a collective in flight.
std::function<void(size_t)> categorical_switch(KnobId id, Backend& data) {
  switch (id) {
    case KnobId::kHierarchicalAllreduce:
      // The composite exists where init built it (asked for, or offered to the autotuner on
      // several hosts of equal rank counts); elsewhere the data plane is flat for good.
      if (auto* h = dynamic_cast<HierarchicalBackend*>(&data))
        return [h](size_t choice) { h->set_hierarchical(choice == 1); };
      return nullptr;
    default:
      return nullptr;
  }
}

// How this Runtime's messages name `rank` (RuntimeConfig::rank_names).
int named_rank(const RuntimeConfig& config, int rank) {
  return rank >= 0 && static_cast<size_t>(rank) < config.rank_names.size() ? config.rank_names[rank]
                                                                           : rank;
}

// The largest serialized request or response list a rank may announce, and the largest sum of
// all ranks' request lists. Far above any real list (10,000 requests take ~1 MiB); a length
// beyond it, or below 0, is a broken or hostile peer, and must not reach an allocation.
constexpr int64_t kMaxListBytes = int64_t{1} << 30;

// The byte counts of an allgather of request lists, as the ranks announced them, checked before
// anything is allocated from them; returns their sum.
Result<int64_t> checked_list_lengths(const std::vector<int64_t>& lengths,
                                     const RuntimeConfig& config) {
  int64_t total = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    const int64_t l = lengths[r];
    if (l < 0 || l > kMaxListBytes - total)
      return Status::IoError(
          "negotiation: rank " + std::to_string(named_rank(config, static_cast<int>(r))) +
          " announced a request list of " + std::to_string(l) + " bytes (the lists may take " +
          std::to_string(kMaxListBytes) + " bytes in all; " + std::to_string(total) +
          " before it); the ranks are out of step or a peer is broken");
    total += l;
  }
  return total;
}

}  // namespace

// Note [Waiter drives]
// A blocking call (kolo::allreduce, ...) would otherwise cost two thread hand-offs: the
// background thread runs the cycle while the caller waits, then wakes it. When the ranks'
// threads share cores (kolorun binds each rank to one CPU) each hand-off is a context switch,
// about 1.35 us on the development VM, a third of a small allreduce. So the caller of a
// blocking call, waiting on its handle, runs the cycles itself while no other thread does:
// - The turn (Runtime::turn_, under mu_) says who runs cycles; its holder alone touches the
//   negotiation state, the backends and the executor. The background thread gives it up
//   between its cycles and takes it back when it has work and the turn is free.
// - A blocking call's submission (Entry::caller_waits) does not wake a sleeping background
//   thread: its caller will take the turn. If the background thread holds it, it is awake and
//   sees the queue; a caller that ends its turn with work left wakes it.
// - Only blocking calls drive. A wait on an asynchronous handle leaves the cycles to the
//   background thread, which its submission woke: a step of 10,000 async allreduces whose
//   waits also drove ran 11% slower (medians of 13 alternating runs), as the turn changed
//   hands between cycles.
// - Callbacks stay on the background thread, as Handle::then promises: a driving caller's
//   completions with callbacks go to deferred_ (DeferCallbacks), and the op's waiters wake
//   when the background thread has run them.
// - Callers drive only runtimes that have seen host operations alone and have no device
//   backend: CUDA work would set the caller's current device, which is the user's. Never with
//   a timeout: a cycle can block for a peer past it.
// - Handles outlive runtimes: the Gate refuses drives once the loop is over and shutdown
//   waits for any still inside it.

class Runtime::Gate final : public detail::CycleDriver {
 public:
  explicit Gate(Runtime* rt) : rt_(rt) {}
  void drive(const detail::OpState& op) override {
    Runtime* rt;
    {
      MutexLock lock(mu_);
      if (rt_ == nullptr) return;
      rt = rt_;
      ++inside_;
    }
    rt->drive(op);
    MutexLock lock(mu_);
    if (--inside_ == 0 && rt_ == nullptr) cv_.notify_all();
  }
  // No drive starts after it; returns when those inside have left.
  void close() {
    MutexLock lock(mu_);
    rt_ = nullptr;
    cv_.wait(lock.native(), [&]() KOLO_REQUIRES(mu_) { return inside_ == 0; });
  }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  Runtime* rt_ KOLO_GUARDED_BY(mu_);
  int inside_ KOLO_GUARDED_BY(mu_) = 0;
};

std::string timeline_path_for_rank(const std::string& path, int rank, int size) {
  const std::string token = "{rank}";
  if (auto p = path.find(token); p != std::string::npos)
    return path.substr(0, p) + std::to_string(rank) + path.substr(p + token.size());
  if (size == 1) return path;
  // Ranks on one host would otherwise write the same file. The rank goes before the extension,
  // which must stay last: ".gz" selects gzip.
  for (const std::string ext : {".json.gz", ".json", ".gz"}) {
    if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
      return path.substr(0, path.size() - ext.size()) + ".rank" + std::to_string(rank) + ext;
  }
  return path + ".rank" + std::to_string(rank);
}

Runtime::Runtime(RuntimeConfig config, Topology topology, std::unique_ptr<Backend> data,
                 std::unique_ptr<Backend> control, std::unique_ptr<Backend> gpu, TimelineRows rows)
    : config_(std::move(config)),
      topology_(topology),
      owns_timeline_(!rows.shared),
      timeline_(rows.shared ? std::move(rows.shared)
                            : std::make_shared<Timeline>(TimelineOptions{.stop_on_signals = true})),
      rows_(std::move(rows.prefix)),
      data_(std::move(data)),
      control_(std::move(control)),
      gpu_(std::move(gpu)),
      cache_(config_.cache_capacity),
      fusion_threshold_(config_.fusion_threshold),
      cycle_time_(config_.cycle_time),
      executor_(*data_, *timeline_, rows_, gpu_.get()),
      bits_(1 + config_.cache_capacity),
      gather_control_(config_.piggyback_bytes > 0 &&
                      topology_.size <= config_.piggyback_max_ranks) {
  if (topology_.rank == 0)
    controller_ = std::make_unique<Controller>(
        topology_.size,
        StallConfig{config_.stall_check_time, config_.stall_shutdown_time, config_.report_stuck,
                    config_.mismatch_time},
        config_.rank_names);
  if (config_.name_first_failure) executor_.name_failures_with(config_.name_first_failure);
  executor_.reduce_exactly(config_.exact_reduction);
  device_ = dynamic_cast<DeviceBackend*>(gpu_.get());
  drivable_ = gpu_ == nullptr;
  gate_ = std::make_shared<Gate>(this);
}

Result<std::unique_ptr<Runtime>> Runtime::create(RuntimeConfig config, Topology topology,
                                                 std::unique_ptr<Backend> data,
                                                 std::unique_ptr<Backend> control,
                                                 std::unique_ptr<Backend> gpu, TimelineRows rows) {
  if (!data || !control)
    return Status::InvalidArgument("Runtime: data and control backends are required");
  if (data->size() != topology.size || control->size() != topology.size ||
      data->rank() != topology.rank || control->rank() != topology.rank)
    return Status::InvalidArgument(
        "Runtime: backends must span the topology: rank " + std::to_string(topology.rank) + " of " +
        std::to_string(topology.size) + ", data backend has rank " + std::to_string(data->rank()) +
        " of " + std::to_string(data->size()) + ", control backend rank " +
        std::to_string(control->rank()) + " of " + std::to_string(control->size()));
  if (gpu && (gpu->size() != topology.size || gpu->rank() != topology.rank))
    return Status::InvalidArgument("Runtime: the gpu backend " + std::string(gpu->name()) +
                                   " has rank " + std::to_string(gpu->rank()) + " of " +
                                   std::to_string(gpu->size()) + ", the topology rank " +
                                   std::to_string(topology.rank) + " of " +
                                   std::to_string(topology.size));
  // A categorical knob this job cannot switch is not searched (rank 0's tuner reads this).
  for (CategoricalTunable& t : config.autotune.categorical)
    if (!t.fixed && !categorical_switch(t.id, *data)) t.fixed = true;
  std::unique_ptr<Runtime> rt(new Runtime(std::move(config), topology, std::move(data),
                                          std::move(control), std::move(gpu), std::move(rows)));
  if (rt->config_.autotune.enabled && topology.rank == 0) {
    KOLO_ASSIGN_OR_RETURN(rt->tuner_, Tuner::create(rt->config_, *rt->timeline_));
  }
  if (rt->owns_timeline_ && !rt->config_.timeline_path.empty() &&
      (!rt->config_.timeline_steps || rt->config_.timeline_steps->first == 0))
    KOLO_RETURN_IF_ERROR(
        rt->start_timeline(rt->config_.timeline_path, rt->config_.timeline_mark_cycles));
  rt->thread_ = std::thread([r = rt.get()] { r->loop(); });
  return rt;
}

Runtime::~Runtime() { (void)shutdown(); }

Status Runtime::start_timeline(const std::string& path, bool mark_cycles) {
  if (!owns_timeline_)
    return Status::PreconditionFailed(config_.label +
                                      " records on the global set's timeline; start that one");
  return timeline_->start(timeline_path_for_rank(path, topology_.rank, topology_.size),
                          topology_.rank, mark_cycles);
}

void Runtime::mark_step() {
  if (tuner_) {  // the autotuner's score: the time between step boundaries
    MutexLock lock(mu_);
    marks_.push_back(std::chrono::steady_clock::now());
  }
  // Release: the tuner, reading the count, sees the mark recorded above.
  const int64_t step = steps_marked_.fetch_add(1, std::memory_order_acq_rel) + 1;  // begins now
  if (const auto& window = config_.timeline_steps; window && !config_.timeline_path.empty()) {
    if (step == window->first) {
      Status st = start_timeline(config_.timeline_path, config_.timeline_mark_cycles);
      if (!st.ok()) KOLO_LOG_ERROR("KOLO_TIMELINE_STEPS: " << st.to_string());
    }
    if (step == window->end) {
      timeline_->stop("the recording window KOLO_TIMELINE_STEPS=" + std::to_string(window->first) +
                      ":" + std::to_string(window->end) + " ended");
    }
  }
  timeline_->global_instant(trace_format::kStepMarker,
                            {{std::string(trace_format::kStepArg), std::to_string(step)}});
}

Handle Runtime::submit(std::unique_ptr<Entry> entry) {
  auto state = entry->state;
  Handle handle(state);
  const std::string& name = entry->request.name;
  const char* op = op_type_name(entry->request.type);
  {
    MutexLock lock(mu_);
    Status reject;
    if (stopped_) {
      reject = final_status_;
    } else if (joined_locally_) {
      reject = Status::InvalidArgument(std::string(op) + " '" + name +
                                       "': this rank has joined; no operations may be "
                                       "submitted until every rank has joined");
    } else if (in_flight_.count(name)) {
      reject = Status::InvalidArgument(std::string(op) + " '" + name +
                                       "': an operation with this name is already in flight "
                                       "on this rank; names must be unique until completed");
    }
    if (reject.ok()) {
      // Note [Waiter drives]: not once a device operation was seen (staging its tensors sets
      // the thread's current CUDA device, which is the user's on a caller's thread).
      if (!entry->request.device.is_cpu()) drivable_ = false;
      const bool caller_waits = drivable_ && entry->caller_waits;
      if (caller_waits) state->set_driver(gate_);
      in_flight_.insert(name);
      if (entry->request.type == OpType::kJoin) joined_locally_ = true;
      entry->submitted = std::chrono::steady_clock::now();
      if (timeline_->active()) trace_submission(*entry);
      queue_.push_back(std::move(entry));
      queued_.store(queue_.size(), std::memory_order_release);
      // A spinning or busy background thread sees the queue by itself; only a sleeping
      // one needs the (system-call) wake-up, and not for a caller that runs the cycle itself.
      if (!sleeping_ || caller_waits) return handle;
    } else {
      lock.unlock();
      state->complete(reject);
      return handle;
    }
  }
  cv_.notify_one();
  return handle;
}

Status Runtime::shutdown() {
  {
    MutexLock lock(mu_);
    shutdown_requested_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  gate_->close();  // a driving caller ends with the loop; none starts now
  fail_all(Status::Aborted(config_.label.empty()
                               ? "kolo was shut down on rank " + std::to_string(topology_.rank)
                               : config_.label + " was removed on its rank " +
                                     std::to_string(named_rank(config_, topology_.rank))));
  if (owns_timeline_) timeline_->stop();
  return Status::Ok();
}

std::vector<Runtime::AppliedTuning> Runtime::applied_tunings() const {
  MutexLock lock(mu_);
  return applied_;
}

std::optional<int64_t> Runtime::tuned_bucket_bytes() const {
  const int64_t step = steps_marked();
  MutexLock lock(mu_);
  for (auto it = applied_.rbegin(); it != applied_.rend(); ++it)
    if (it->decision.apply_step <= step) return it->decision.bucket_bytes;
  return std::nullopt;
}

Status Runtime::apply_tuning(const TuneDecision& d) {
  TimelineArgs counter = {{"fusion_threshold_bytes", std::to_string(d.fusion_threshold)},
                          {"cycle_time_us", std::to_string(d.cycle_time_ns / 1000)},
                          {"bucket_bytes", std::to_string(d.bucket_bytes)}};
  for (const TunedChoice& c : d.choices) {
    const Knob& k = knob(static_cast<KnobId>(c.knob));  // a registry row (the parser checked)
    std::function<void(size_t)> flip;
    if (is_categorical_tunable(k) && static_cast<size_t>(c.choice) < knob_choices(k).size())
      flip = categorical_switch(k.id, *data_);
    // Rank 0 searches only what its own data plane can switch, and every rank's is built
    // alike; a rank that cannot follow would run other collectives than its peers.
    if (!flip)
      return Status::Internal("autotune: rank " + std::to_string(topology_.rank) +
                              " cannot switch " + std::string(k.name) + " to choice " +
                              std::to_string(c.choice) + " (data backend " +
                              std::string(data_->name()) + ")");
    flip(static_cast<size_t>(c.choice));
    counter.push_back({categorical_column(k.id), std::to_string(c.choice)});
  }
  fusion_threshold_ = d.fusion_threshold;
  cycle_time_ = std::chrono::nanoseconds(d.cycle_time_ns);
  const auto* hierarchy = dynamic_cast<const HierarchicalBackend*>(data_.get());
  const bool hierarchical = hierarchy && hierarchy->hierarchical();
  {
    MutexLock lock(mu_);
    applied_.push_back({cycles_, d, hierarchical});
  }
  KOLO_LOG_DEBUG("autotune: cycle "
                 << cycles_ << ": threshold " << format_size(d.fusion_threshold) << ", cycle time "
                 << format_duration(cycle_time_) << ", bucket "
                 << format_size(static_cast<uint64_t>(d.bucket_bytes)) << " from step "
                 << d.apply_step << ", hierarchical allreduce " << (hierarchical ? "on" : "off"));
  timeline_->counter("autotune", counter);
  return Status::Ok();
}

Status Runtime::measure_link() {
  // Latency from 8-byte allreduces, bandwidth from 4 MiB ones (the default fusion buffer);
  // the first of each warms up connections and buffers. Medians, as the machine is shared.
  auto timed = [&](size_t bytes, int reps) -> Result<double> {
    std::vector<float> buf(bytes / sizeof(float), 1.0f);
    std::vector<double> t;
    for (int i = 0; i <= reps; ++i) {
      const auto start = std::chrono::steady_clock::now();
      KOLO_RETURN_IF_ERROR(data_
                               ->allreduce(buf.data(), buf.data(), static_cast<int64_t>(buf.size()),
                                           DataType::kFloat32, Reduction{ReduceOp::kSum})
                               .with_context("autotune (link measurement)"));
      if (i > 0)
        t.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  };
  KOLO_ASSIGN_OR_RETURN(double latency, timed(8, 9));
  constexpr size_t kBig = size_t{4} << 20;
  KOLO_ASSIGN_OR_RETURN(double big, timed(kBig, 3));
  if (tuner_)
    tuner_->set_link({latency, static_cast<double>(kBig) / std::max(big - latency, 1e-9)});
  return Status::Ok();
}

std::vector<std::string> Runtime::stall_warnings() const {
  MutexLock lock(mu_);
  return stall_warnings_;
}

Status Runtime::failure() const {
  MutexLock lock(mu_);
  return stopped_ ? final_status_ : Status::Ok();
}

void Runtime::trace_submission(Entry& e) {
  // What the operation is, from the start: a span that never ends (a hang, a kill) still says
  // it; the executor adds the backend, fused count and status at the end.
  const Request& r = e.request;
  if (e.trace_kind.empty()) e.trace_kind = to_upper(op_type_name(r.type));
  e.trace = timeline_->begin_op(rows_.empty() ? r.name : rows_ + r.name, e.trace_kind,
                                operation_args(r.shapes, r.dtype), trace_format::kQueuePhase);
}

void Runtime::end_queue_span(Entry& e) {
  timeline_->next(e.trace, trace_format::kNegotiatePhase);  // QUEUE ends, NEGOTIATE begins
}

TimelineArgs Runtime::marker_args(TimelineArgs args) const {
  if (!rows_.empty()) args.emplace_back("process_set", config_.label);
  return args;
}

void Runtime::fail_all_and_abort(const Status& why) {
  fail_all(why);
  // A peer died (or this rank broke): NCCL would wait for it forever, so the GPU work still
  // queued fails now with the reason, which names the peer when a peer is the cause.
  if (device_) device_->abort(why);
}

void Runtime::fail_all(const Status& status) {
  std::deque<std::unique_ptr<Entry>> queued;
  Status final_status;  // the first failure's, which every operation ends with
  {
    MutexLock lock(mu_);
    if (!stopped_) {
      stopped_ = true;
      final_status_ = status;
    }
    final_status = final_status_;
    queued.swap(queue_);
    in_flight_.clear();
  }
  // pending_ belongs to the turn's holder; this runs on it or after the loop has ended.
  // Every phase still open of a failed operation ends with the Status it failed with.
  const TimelineArgs failed = timeline_status_args(final_status);
  for (auto& [name, e] : pending_) {
    timeline_->end_all(e->trace, failed);
    e->state->complete(final_status);
  }
  pending_.clear();
  for (auto& e : queued) {
    timeline_->end_all(e->trace, failed);
    e->state->complete(final_status);
  }
}

void Runtime::spin_for_submission() {
  // A caller that waits on a handle typically submits its next operation a few
  // microseconds after the completion wakes it (a training step's next gradient, a
  // ping-pong); catching that without a sleep and a futex wake-up saves two scheduler hops.
  // Yielding keeps the spin from taking the core from the very thread it waits for.
  constexpr auto kSpin = std::chrono::microseconds(50);
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (queued_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
}

void Runtime::loop() {
  set_log_rank(topology_.rank);
  last_start_ = std::chrono::steady_clock::now() - cycle_time_;
  Status st = config_.autotune.enabled ? measure_link() : Status::Ok();
  bool stop = false;
  bool idle = true;
  while (st.ok() && !stop) {
    bool shutdown_requested = false;
    if (!await_turn(idle, shutdown_requested)) return;
    st = run_cycle(shutdown_requested, stop);
    idle = pending_.empty();
  }
  end_loop(st);
}

bool Runtime::await_turn(bool idle, bool& shutdown_requested) {
  {
    MutexLock lock(mu_);
    turn_ = Turn::kNone;
  }
  run_deferred_callbacks();
  if (idle) spin_for_submission();
  MutexLock lock(mu_);
  for (;;) {
    if (loop_ended_ || !deferred_.empty()) {
      lock.unlock();
      run_deferred_callbacks();
      lock.lock();
      if (loop_ended_) return false;
      continue;
    }
    if (turn_ == Turn::kNone && work_for_background()) break;
    // Idle, or a caller drives: sleep until there is work for this thread, at most one
    // heartbeat (then a cycle of its own, when the turn is free).
    sleeping_ = true;
    const bool woke = cv_.wait_for(lock.native(), config_.heartbeat, [&]() KOLO_REQUIRES(mu_) {
      return loop_ended_ || !deferred_.empty() || (turn_ == Turn::kNone && work_for_background());
    });
    sleeping_ = false;
    if (!woke && turn_ == Turn::kNone) break;
  }
  turn_ = Turn::kBackground;
  if (!pending_.empty() && !idle_peer_) {
    // Busy: the batching window, so close submissions share a cycle. (Skipped when a
    // peer was idle last cycle: what is pending waits for that peer's next submission,
    // and its cycle starts at once; see gather_bits.)
    cv_.wait_until(lock.native(), last_start_ + cycle_time_,
                   [&]() KOLO_REQUIRES(mu_) { return shutdown_requested_; });
  }
  shutdown_requested = shutdown_requested_;
  take_queue();
  return true;
}

bool Runtime::work_for_background() const {
  return !queue_.empty() || !pending_.empty() || shutdown_requested_;
}

void Runtime::take_queue() {
  const auto now = std::chrono::steady_clock::now();
  while (!queue_.empty()) {
    std::unique_ptr<Entry> e = std::move(queue_.front());
    queue_.pop_front();
    e->pending_since = now;
    if (e->request.type == OpType::kJoin) {
      join_to_send_ = true;
      e->sent_slow = true;  // travels as the join flag, not as a request
    }
    e->seq = next_seq_++;
    pending_[e->request.name] = std::move(e);
  }
  queued_.store(0, std::memory_order_relaxed);
}

void Runtime::drive(const detail::OpState& op) {
  bool shutdown_requested;
  {
    MutexLock lock(mu_);
    if (!drivable_ || turn_ != Turn::kNone || loop_ended_) return;
    turn_ = Turn::kCaller;
    shutdown_requested = shutdown_requested_;
    take_queue();
  }
  {
    detail::DeferCallbacks defer([this](std::function<void()> callbacks) {
      MutexLock lock(mu_);
      deferred_.push_back(std::move(callbacks));
    });
    Status st;
    bool stop = false;
    for (bool first = true; !op.settled() && st.ok() && !stop; first = false) {
      if (!first && !caller_may_continue(shutdown_requested)) break;
      caller_cycles_.fetch_add(1, std::memory_order_relaxed);
      st = run_cycle(shutdown_requested, stop);
    }
    if (!st.ok() || stop) end_loop(st);
  }
  bool wake;
  {
    MutexLock lock(mu_);
    turn_ = Turn::kNone;
    wake = sleeping_ && (loop_ended_ || !deferred_.empty() || work_for_background());
  }
  if (wake) cv_.notify_all();
}

bool Runtime::caller_may_continue(bool& shutdown_requested) {
  MutexLock lock(mu_);
  if (!drivable_) return false;  // a device operation came: the background thread runs it
  if (!idle_peer_)
    cv_.wait_until(lock.native(), last_start_ + cycle_time_,
                   [&]() KOLO_REQUIRES(mu_) { return shutdown_requested_; });
  shutdown_requested = shutdown_requested_;
  if (!drivable_) return false;
  take_queue();
  return true;
}

Status Runtime::run_cycle(bool shutdown_requested, bool& stop) {
  for (auto& [name, e] : pending_)
    if (e->trace != 0 && e->pending_since >= last_start_) end_queue_span(*e);
  last_start_ = std::chrono::steady_clock::now();
  // A device backend that aborted by itself (an NCCL error, an operation past
  // KOLO_OP_TIMEOUT): stop, so that the control plane tells the peers, whose side of the
  // failed operation would otherwise wait for this rank until their own op timeout. Checked
  // every cycle, so within a heartbeat.
  if (Status st = device_ ? device_->failure() : Status::Ok(); !st.ok()) return st;
  try {
    return cycle(shutdown_requested, stop);
  } catch (const Error& e) {
    // A broken invariant (KOLO_ENFORCE), i.e. a bug in Kolo. The ranks may be out of step,
    // so the runtime stops as after a backend failure and every handle gets the error.
    return e.status();
  } catch (const std::exception& e) {
    // Anything else (bad_alloc, a library's exception) would end the process through
    // std::terminate with no handle completed: stop as above, naming it.
    return Status::Internal(std::string("kolo background loop: unexpected exception: ") + e.what());
  }
}

void Runtime::end_loop(const Status& st) {
  if (!st.ok()) stop_after_failure(st);
  {
    MutexLock lock(mu_);
    loop_ended_ = true;
  }
  cv_.notify_all();
}

void Runtime::run_deferred_callbacks() {
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(mu_);
    callbacks.swap(deferred_);
  }
  for (auto& run : callbacks) run();
}

void Runtime::stop_after_failure(Status st) {
  if (config_.name_first_failure) st = config_.name_first_failure(st);
  KOLO_LOG_ERROR("kolo background loop stopped: " << st.to_string());
  timeline_->instant({}, "FAILURE", marker_args(timeline_status_args(st)));
  fail_all_and_abort(st);
}

Status Runtime::cycle(bool shutdown_requested, bool& stop) {
  // Only the timeline's owner marks cycles: a set's are not the rank's cycles.
  if (owns_timeline_) timeline_->mark_cycle();
  ++cycles_;
  const auto now = std::chrono::steady_clock::now();
  // Step 1: the bit vector. Gathered messages only carry the slots in use; the allreduce keeps
  // its fixed size.
  const size_t nbits = gather_control_ ? 1 + cache_.slot_limit() : bits_.size();
  std::vector<std::pair<uint64_t, Entry*>> slow = sort_pending(nbits, now);
  // Rank 0 also takes the slow path now and then while names wait in its table, so that the
  // stall inspector runs even when no rank has anything new to say.
  const bool inspect =
      controller_ && controller_->pending() > 0 &&
      (config_.stall_check_time.count() > 0 || config_.mismatch_time.count() > 0) &&
      now - last_inspection_ >= config_.heartbeat;
  const bool tune = tuner_ && tuner_->has_decision();
  const bool need_slow = !slow.empty() || shutdown_requested || join_to_send_ ||
                         !joined_ranks_.empty() || inspect || tune;
  // Byte 0: 0 needs the slow path; otherwise 2 when this rank has nothing pending at all
  // (see gather_bits), else 1.
  bits_[0] = need_slow ? 0 : pending_.empty() ? 2 : 1;
  KOLO_RETURN_IF_ERROR(exchange_bits(nbits));
  std::vector<Response> responses;
  for (size_t s = 0; s + 1 < nbits; ++s)
    if (bits_[1 + s]) responses.push_back(cache_.response(s));

  ResponseList list;
  if (bits_[0] == 0)
    KOLO_RETURN_IF_ERROR(run_slow_path(std::move(slow), shutdown_requested, list, responses));
  KOLO_RETURN_IF_ERROR(execute(responses));
  return end_cycle(list, responses, stop);
}

std::vector<std::pair<uint64_t, Entry*>> Runtime::sort_pending(
    size_t nbits, std::chrono::steady_clock::time_point now) {
  std::fill(bits_.begin(), bits_.begin() + nbits, 0);
  std::vector<std::pair<uint64_t, Entry*>> slow;
  cached_.clear();
  const bool joined_mode = !joined_ranks_.empty();
  // Requests that miss the cache, or whose bit has gone unanswered for half the stall time or
  // half the mismatch time (so rank 0 can name who is missing, or what each rank waits in),
  // take the slow path.
  std::chrono::nanoseconds stale_after = std::chrono::nanoseconds::max();
  for (auto bound : {config_.stall_check_time, config_.mismatch_time})
    if (bound.count() > 0) stale_after = std::min(stale_after, bound / 2);
  for (auto& [name, e] : pending_) {
    if (e->sent_slow) continue;
    std::optional<size_t> slot = joined_mode ? std::nullopt : cache_.lookup(e->request);
    bool stale = now - e->pending_since > stale_after;
    if (slot && !stale) {
      bits_[1 + *slot] = 1;
      cached_.push_back({*slot, e.get()});
    } else {
      slow.push_back({e->seq, e.get()});
    }
  }
  return slow;
}

Status Runtime::exchange_bits(size_t nbits) {
  if (gather_control_) return gather_bits(nbits);
  return control_
      ->allreduce(bits_.data(), bits_.data(), static_cast<int64_t>(nbits), DataType::kUInt8,
                  Reduction{ReduceOp::kMin})
      .with_context("negotiation (cache bit vector)");
}

Status Runtime::run_slow_path(std::vector<std::pair<uint64_t, Entry*>> slow,
                              bool shutdown_requested, ResponseList& list,
                              std::vector<Response>& responses) {
  std::sort(slow.begin(), slow.end(), [](auto& a, auto& b) { return a.first < b.first; });
  RequestList mine;
  mine.shutdown = shutdown_requested;
  mine.join = join_to_send_;
  for (auto& [seq, e] : slow) {
    mine.requests.push_back(e->request);
    e->sent_slow = true;
  }
  join_to_send_ = false;
  KOLO_RETURN_IF_ERROR(negotiate_slow(mine, list));
  for (const auto& name : list.evictions) cache_.erase(name);
  if (list.tune.apply_step >= 0) KOLO_RETURN_IF_ERROR(apply_tuning(list.tune));
  joined_ranks_ = list.joined;
  responses.insert(responses.end(), std::make_move_iterator(list.responses.begin()),
                   std::make_move_iterator(list.responses.end()));
  return Status::Ok();
}

Status Runtime::end_cycle(const ResponseList& list, const std::vector<Response>& responses,
                          bool& stop) {
  if (tuner_) {
    std::vector<std::chrono::steady_clock::time_point> marks;
    {
      MutexLock lock(mu_);
      marks.swap(marks_);
    }
    tuner_->observe(marks, responses, std::chrono::steady_clock::now());
  }
  // A rank stuck past the stall shutdown time is a failed peer (an elastic job re-forms without
  // it), as one that died is.
  if (!list.fatal.empty()) return Status::PeerFailure(list.fatal);
  if (list.shutdown_rank >= 0) {
    fail_all(Status::Aborted(shutdown_message(list.shutdown_rank)));
    stop = true;
  }
  return Status::Ok();
}

std::string Runtime::shutdown_message(int rank) {
  const std::string cancelled = "; pending operations were cancelled";
  if (std::optional<std::string> departure = departure_of(rank))
    return (config_.label.empty() ? "kolo was shut down" : config_.label + " was closed") + ": " +
           *departure + cancelled;
  if (!config_.label.empty())
    return config_.label + " was removed (its rank " + std::to_string(named_rank(config_, rank)) +
           " called " + config_.closed_by + ")" + cancelled;
  return "kolo was shut down (rank " + std::to_string(rank) + " called shutdown())" + cancelled;
}

std::optional<std::string> Runtime::departure_of(int rank) {
  if (rank == topology_.rank || !config_.describe_departure) return std::nullopt;
  bool work = !pending_.empty();
  if (!work) {
    MutexLock lock(mu_);
    work = !queue_.empty();
  }
  // Note [Departures]: asked only when something fails, since it may wait for the launcher.
  if (!work) return std::nullopt;
  return config_.describe_departure(rank);
}

Status Runtime::negotiate_slow(const RequestList& mine, ResponseList& out) {
  const int size = topology_.size;
  std::string bytes = serialize(mine);
  int64_t length = static_cast<int64_t>(bytes.size());
  std::vector<int64_t> lengths(size);
  KOLO_RETURN_IF_ERROR(
      control_->allgather(&length, lengths.data(), DataType::kInt64, std::vector<int64_t>(size, 1))
          .with_context("negotiation (request sizes)"));
  KOLO_ASSIGN_OR_RETURN(const int64_t total, checked_list_lengths(lengths, config_));
  std::string all(static_cast<size_t>(total), '\0');
  KOLO_RETURN_IF_ERROR(control_->allgather(bytes.data(), all.data(), DataType::kUInt8, lengths)
                           .with_context("negotiation (requests)"));
  std::string reply;
  int64_t reply_length = 0;
  if (topology_.rank == 0) {
    auto now = std::chrono::steady_clock::now();
    last_inspection_ = now;
    int64_t offset = 0;
    for (int r = 0; r < size; ++r) {
      KOLO_ASSIGN_OR_RETURN(RequestList theirs, parse_request_list(all.substr(offset, lengths[r])));
      offset += lengths[r];
      controller_->add(r, theirs, cache_, now);
    }
    out = controller_->respond(now);
    if (tuner_)
      if (auto d = tuner_->take_decision(steps_marked())) out.tune = *d;
    for (auto& w : controller_->take_warnings()) {
      KOLO_LOG_WARNING(w);
      timeline_->instant({}, "STALL_WARNING", marker_args({{"message", w}}));
      MutexLock lock(mu_);
      stall_warnings_.push_back(std::move(w));
    }
    reply = serialize(out);
    reply_length = static_cast<int64_t>(reply.size());
  }
  KOLO_RETURN_IF_ERROR(control_->broadcast(&reply_length, 1, DataType::kInt64, 0)
                           .with_context("negotiation (response size)"));
  if (reply_length < 0 || reply_length > kMaxListBytes)
    return Status::IoError("negotiation: rank " + std::to_string(named_rank(config_, 0)) +
                           " announced a response list of " + std::to_string(reply_length) +
                           " bytes (at most " + std::to_string(kMaxListBytes) +
                           "); the ranks are out of step or a peer is broken");
  reply.resize(static_cast<size_t>(reply_length));
  KOLO_RETURN_IF_ERROR(control_->broadcast(reply.data(), reply_length, DataType::kUInt8, 0)
                           .with_context("negotiation (responses)"));
  if (topology_.rank != 0) {
    KOLO_ASSIGN_OR_RETURN(out, parse_response_list(reply));
  }
  return Status::Ok();
}

std::vector<BatchItem> Runtime::claim(const std::vector<const Response*>& responses) {
  std::vector<BatchItem> items;
  items.reserve(responses.size());
  MutexLock lock(mu_);
  for (const Response* p : responses) {
    auto it = pending_.find(p->name);
    // By type too: a response is this rank's entry only if it is the same operation.
    Entry* e =
        it == pending_.end() || it->second->request.type != p->type ? nullptr : it->second.get();
    items.push_back({p, e});
    // Free the name first: a callback (or a waiter) may resubmit it at once.
    if (e) in_flight_.erase(p->name);
    if (p->type == OpType::kJoin) joined_locally_ = false;
  }
  return items;
}

void Runtime::retire(const std::vector<BatchItem>& items) {
  for (const auto& item : items) {
    const Response& p = *item.response;
    if (p.kind == Response::Kind::kExecute && p.joined.empty() && p.type != OpType::kJoin) {
      cache_.put(p, item.entry ? &item.entry->request : nullptr);
    } else {
      cache_.erase(p.name);
    }
    if (item.entry) {  // else a joined rank's stand-in: any pending entry of that name is another
      pending_.erase(p.name);
    }
  }
}

void Runtime::end_negotiate_spans(const std::vector<BatchItem>& items) {
  if (!timeline_->active()) return;
  for (auto& item : items)
    if (item.entry) timeline_->end(item.entry->trace);  // NEGOTIATE
}

Status Runtime::execute(const std::vector<Response>& responses) {
  if (responses.empty()) return Status::Ok();
  auto batches = plan_fusion(responses, fusion_threshold_);
  std::vector<const Response*> batch_responses;
  for (const auto& batch : batches) {
    batch_responses.clear();
    for (size_t i : batch) batch_responses.push_back(&responses[i]);
    std::vector<BatchItem> items = claim(batch_responses);
    end_negotiate_spans(items);
    Status st = executor_.run(items);
    retire(items);
    KOLO_RETURN_IF_ERROR(st);
  }
  return Status::Ok();
}

}  // namespace kolo::coord
