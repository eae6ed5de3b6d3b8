#include "timeline/timeline.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "common/logging.h"
#include "common/thread_annotations.h"
#include "timeline/signal_stop.h"
#include "timeline/trace_event.h"
#include "timeline/trace_format.h"
#include "timeline/trace_sink.h"

namespace kolo {

using timeline_detail::EventKind;
using timeline_detail::PackedEvents;
using timeline_detail::TraceSink;

namespace {

// Batches of this many events keep the two queue vectors small (they are reused, so steady
// state allocates nothing for them) while costing one writer wake-up per few thousand events.
constexpr size_t kDefaultWakeWriterAt = 4096;

// The writer formats into a buffer and writes it once it holds this much (or the batch ends).
constexpr size_t kWriteChunkBytes = 1 << 20;

// The text (name and args) of an operation's span with its usual args, for the queue's reserve.
constexpr size_t kTextBytesPerEvent = 96;

// Lets the track map be searched with a string_view (no std::string built per event).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct OpenSpan {
  std::string name;
  int64_t ts_ns;
  TimelineArgs args;
};

// A thread track of the file.
struct Row {
  int tid;
  bool named = false;  // its thread_name record has been queued
  bool held = false;   // an operation is open on it (Note [Timeline rows])
  std::string tensor;  // a sibling row's tensor; empty for a tensor's own row and the markers
};

// An operation's open spans, in a slot that is reused once the operation ends (so steady state
// allocates no slot). A token is the slot's index and the operation's generation: a token of an
// operation that ended (or of an earlier recording) finds another generation there.
struct OpenOp {
  uint32_t generation = 0;  // 0: the slot is free
  Row* row = nullptr;       // rows are map nodes: stable until the recording ends
  const std::string* row_name = nullptr;
  std::vector<OpenSpan> spans;  // [0] the operation's own, innermost last
  int64_t last_edge = 0;        // the latest begin or end recorded (Note [Shared clock reads])
};

constexpr uint64_t token_of(uint32_t slot, uint32_t generation) {
  return (uint64_t{generation} << 32) | slot;
}

// The file's first events, written before any recording: names first, so viewers label tracks.
// Metadata carry "ts": 0 although they have no time: speedscope rejects events without it.
std::string trace_header(int rank, int64_t wall_us) {
  std::string header = "[\n";
  auto meta = [&](std::string_view name, int tid, const nlohmann::json& args, bool last) {
    nlohmann::json e = {{"name", name}, {"ph", "M"}, {"pid", rank},
                        {"tid", tid},   {"ts", 0},   {"args", args}};
    header += e.dump();
    if (!last) header += ",\n";
  };
  meta("process_name", 0, {{"name", "rank " + std::to_string(rank)}}, false);
  meta("process_sort_index", 0, {{"sort_index", rank}}, false);
  meta("thread_name", trace_format::kMarkersTid, {{"name", trace_format::kMarkersTrackName}},
       false);
  meta(trace_format::kClockSyncEvent, trace_format::kMarkersTid,
       {{trace_format::kWallClockUsArg, wall_us}}, true);
  return header;
}

}  // namespace

// Note [Timeline queue]
// Recording threads and the writer thread share one queue of packed events under `mu` (Note
// [Packed events] in trace_event.cc). A recording call holds the lock only to look up its row
// or operation, stamp the time and pack one event into the queue's reused buffers: no I/O, no
// syscall and, in steady state, no allocation. A begin queues nothing: it pushes the span on its
// operation's stack of open spans, and end() queues the complete event. The writer swaps the
// whole queue out under the lock (packing the open spans too, as the file's replaceable tail)
// and formats and writes the batch without it, so recording never waits for the file. The
// writer is woken when the queue reaches wake_writer_at (one notify per batch, not per event)
// or by its flush interval, whichever comes first.
struct Timeline::Impl final : timeline_detail::SignalStoppable {
  explicit Impl(TimelineOptions o) : options(o) {}

  void stop_for_signal(std::string_view reason) override { stop(reason); }
  void stop(std::string_view reason) KOLO_EXCLUDES(lifecycle_mu, mu);

  const TimelineOptions options;
  std::atomic<bool> active{false};
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> mark_cycles{false};  // set by start() before `active`

  // Serialises start() and stop(); never taken by recording calls. The writer thread gets the
  // sink as an argument: it is the only user of the file between start() and stop()'s join.
  Mutex lifecycle_mu;
  std::thread writer KOLO_GUARDED_BY(lifecycle_mu);
  std::unique_ptr<TraceSink> sink KOLO_GUARDED_BY(lifecycle_mu);
  std::string path KOLO_GUARDED_BY(lifecycle_mu);

  Mutex mu;
  std::condition_variable wake;
  bool recording KOLO_GUARDED_BY(mu) = false;
  bool stopping KOLO_GUARDED_BY(mu) = false;
  int rank KOLO_GUARDED_BY(mu) = 0;
  // Set before the writer starts, so the writer may read it without the lock (reserve_size).
  size_t wake_threshold = 1;
  std::chrono::steady_clock::time_point t0 KOLO_GUARDED_BY(mu);
  PackedEvents pending KOLO_GUARDED_BY(mu);
  std::unordered_map<std::string, Row, StringHash, std::equal_to<>> rows KOLO_GUARDED_BY(mu);
  int next_tid KOLO_GUARDED_BY(mu) = trace_format::kMarkersTid + 1;
  std::vector<OpenOp> ops KOLO_GUARDED_BY(mu);
  std::vector<uint32_t> free_slots KOLO_GUARDED_BY(mu);
  // Generations grow across recordings: a token of an earlier recording never matches.
  uint32_t next_generation KOLO_GUARDED_BY(mu) = 1;
  uint32_t first_generation KOLO_GUARDED_BY(mu) = 1;  // of this recording
  uint64_t unmatched_ends KOLO_GUARDED_BY(mu) = 0;
  Status write_status KOLO_GUARDED_BY(mu);

  // Note [Shared clock reads]. begin_op(..., first_phase) and next() record two edges with one
  // clock read: the phase inside begins 1 ns after its operation, and the next phase 1 ns after
  // the one that ended. Readers compute a span's end as ts + dur in floating point, so a span
  // beginning at the very nanosecond where its predecessor ends may seem to begin inside it
  // (the nesting check of tests/coordinator and speedscope's stack both trip on that); 1 ns
  // apart, never. An operation's edges never go back (edge_ns): were the clock to read the same
  // value twice, the 1 ns ahead could otherwise make a later end precede its begin.
  int64_t edge_ns(OpenOp& op) const KOLO_REQUIRES(mu) {
    op.last_edge = std::max(now_ns(), op.last_edge);
    return op.last_edge;
  }

  int64_t now_ns() const KOLO_REQUIRES(mu) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t0)
        .count();
  }

  // The row named `name`, created on first use: ids are assigned in order of first use and
  // never change while recording.
  std::pair<const std::string, Row>& row_for(std::string_view name) KOLO_REQUIRES(mu) {
    auto it = rows.find(name);
    if (it != rows.end()) return *it;
    int tid = next_tid++;
    return *rows.emplace(std::string(name), Row{tid, false, false, {}}).first;
  }

  // `tensor`'s own row when no operation holds it, else its first free sibling row.
  std::pair<const std::string, Row>& free_row(std::string_view tensor) KOLO_REQUIRES(mu) {
    auto* row = &row_for(tensor);
    for (int lane = 2; row->second.held; ++lane) {
      const int created = next_tid;
      auto* sibling = &row_for(std::string(tensor) + " (" + std::to_string(lane) + ")");
      if (sibling->second.tid == created) sibling->second.tensor = std::string(tensor);
      // A tensor named like the sibling row ("w (2)" itself) has a row that is not one: the
      // next lane then.
      if (sibling->second.tensor == tensor) row = sibling;
    }
    return *row;
  }

  // The open operation of `token`, or null (0, ended, or of another recording).
  OpenOp* op_of(uint64_t token) KOLO_REQUIRES(mu) {
    const auto slot = static_cast<uint32_t>(token);
    const auto generation = static_cast<uint32_t>(token >> 32);
    if (generation == 0 || slot >= ops.size() || ops[slot].generation != generation) return nullptr;
    return &ops[slot];
  }

  // op_of() for an end: an end of an operation of this recording that has ended is a stray
  // one, counted (a bug of the caller's); one of an earlier recording is not.
  OpenOp* op_to_end(uint64_t token) KOLO_REQUIRES(mu) {
    OpenOp* op = op_of(token);
    const auto generation = static_cast<uint32_t>(token >> 32);
    if (!op && generation >= first_generation && generation < next_generation) ++unmatched_ends;
    return op;
  }

  // Whether an event of `row` may be queued: there is room, or it is past_limit (stop()'s final
  // events); else it is counted as dropped. A kept event is preceded by the row's name the first
  // time. The name bypasses the limit (a row must never stay unlabelled), but only comes with a
  // kept event, so it adds at most one record per row that appears in the file.
  bool admit(Row& row, const std::string& row_name, bool past_limit = false) KOLO_REQUIRES(mu) {
    if (!past_limit && !has_room()) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    name_row(row, row_name);
    return true;
  }

  // After a push: wakes the writer once per batch.
  void pushed() KOLO_REQUIRES(mu) {
    if (pending.size() == wake_threshold) wake.notify_one();
  }

  void name_row(Row& row, const std::string& row_name) KOLO_REQUIRES(mu) {
    if (row.named) return;
    row.named = true;
    TimelineArgs args;
    if (!row.tensor.empty()) args.emplace_back(trace_format::kTensorArg, row.tensor);
    pending.push(EventKind::kThreadName, row.tid, 0, 0, row_name, args);
  }

  // Room for a batch and the events recorded while it is being taken (capped: the limit may be
  // "unbounded").
  size_t reserve_size() const {
    return 2 * std::min({options.max_queued_events, wake_threshold, size_t{1} << 20});
  }

  bool has_room() const KOLO_REQUIRES(mu) { return pending.size() < options.max_queued_events; }

  // When several nested spans of an operation close at one instant (a failure, stop(), a flush
  // with spans open), each enclosing span ends 1 ns after the one inside it. Viewers that split
  // complete events into begin/end pairs (speedscope) order equal end times by start time,
  // which would end the parent before its child and leave the child's end unmatched.
  static int64_t nested_end(int64_t ts, int64_t levels_inside) { return ts + levels_inside; }

  // Closes the innermost span of `op` at `ts`, each list of `more` args added to its begin's in
  // turn; the operation's own frees its slot and row. past_limit: queued even when the queue is
  // full (stop()'s final events).
  void close_span(OpenOp& op, int64_t ts, std::initializer_list<const TimelineArgs*> more,
                  bool past_limit = false) KOLO_REQUIRES(mu) {
    const OpenSpan& span = op.spans.back();
    if (admit(*op.row, *op.row_name, past_limit)) {
      pending.push(EventKind::kComplete, op.row->tid, span.ts_ns, ts - span.ts_ns, span.name,
                   span.args, more);
      pushed();
    }
    op.spans.pop_back();
    if (op.spans.empty()) release(op);
  }

  void release(OpenOp& op) KOLO_REQUIRES(mu) {
    op.row->held = false;
    op.generation = 0;
    free_slots.push_back(static_cast<uint32_t>(&op - ops.data()));
  }

  // Closes every span of `op`, innermost first, at `ts` (nested_end), the outermost with
  // `outermost` args too.
  void close_all(OpenOp& op, int64_t ts, const TimelineArgs& args, bool past_limit,
                 const TimelineArgs& outermost = {}) KOLO_REQUIRES(mu) {
    for (int64_t gap = 0; !op.spans.empty(); ++gap) {
      if (op.spans.size() == 1) {
        close_span(op, nested_end(ts, gap), {&args, &outermost}, past_limit);
      } else {
        close_span(op, nested_end(ts, gap), {&args}, past_limit);
      }
    }
  }

  // first_phase: opened inside at the same instant, unless empty.
  uint64_t begin_op(std::string_view tensor, std::string_view kind, TimelineArgs&& args,
                    std::string_view first_phase = {}) KOLO_EXCLUDES(mu) {
    MutexLock lock(mu);
    if (!recording) return 0;  // stopped between the caller's active() check and here
    uint32_t slot;
    if (!free_slots.empty()) {
      slot = free_slots.back();
      free_slots.pop_back();
    } else {
      slot = static_cast<uint32_t>(ops.size());
      ops.emplace_back();
    }
    auto& [row_name, row] = free_row(tensor);
    row.held = true;
    OpenOp& op = ops[slot];
    op.generation = next_generation++;
    if (next_generation == 0) next_generation = 1;  // after 2^32 operations: 0 means free
    op.row = &row;
    op.row_name = &row_name;
    op.last_edge = now_ns();
    op.spans.push_back(OpenSpan{std::string(kind), op.last_edge, std::move(args)});
    if (!first_phase.empty())
      op.spans.push_back(OpenSpan{std::string(first_phase), ++op.last_edge, {}});
    return token_of(slot, op.generation);
  }

  void begin(uint64_t token, std::string_view phase, TimelineArgs&& args) KOLO_EXCLUDES(mu) {
    MutexLock lock(mu);
    if (!recording) return;
    if (OpenOp* op = op_of(token))
      op->spans.push_back(OpenSpan{std::string(phase), edge_ns(*op), std::move(args)});
  }

  void end(uint64_t token, TimelineArgs&& args) KOLO_EXCLUDES(mu) {
    MutexLock lock(mu);
    if (!recording) return;
    if (OpenOp* op = op_to_end(token)) close_span(*op, edge_ns(*op), {&args});
  }

  void next(uint64_t token, std::string_view phase, TimelineArgs&& end_args,
            TimelineArgs&& begin_args) KOLO_EXCLUDES(mu) {
    MutexLock lock(mu);
    if (!recording) return;
    OpenOp* op = op_to_end(token);
    if (!op) return;
    const int64_t ts = edge_ns(*op);
    const bool last = op->spans.size() == 1;  // the operation's own: the operation ends
    close_span(*op, ts, {&end_args});
    if (last) return;
    op->last_edge = ts + 1;  // Note [Shared clock reads]
    op->spans.push_back(OpenSpan{std::string(phase), op->last_edge, std::move(begin_args)});
  }

  void end_all(uint64_t token, const TimelineArgs& args, const TimelineArgs& outermost)
      KOLO_EXCLUDES(mu) {
    MutexLock lock(mu);
    if (!recording) return;
    if (OpenOp* op = op_to_end(token))
      close_all(*op, edge_ns(*op), args, /*past_limit=*/false, outermost);
  }

  void instant(EventKind kind, std::string_view tensor, std::string_view name, TimelineArgs&& args)
      KOLO_EXCLUDES(mu) {
    MutexLock lock(mu);
    if (!recording) return;
    auto& [row_name, row] = row_for(tensor);
    if (!admit(row, row_name)) return;
    pending.push(kind, row.tid, now_ns(), 0, name, args);
    pushed();
  }

  // From stop(): closes the spans still open, innermost first in each operation, past the
  // queue's limit (they are few: one per phase of each operation in flight).
  void queue_final_events(std::string_view reason) KOLO_REQUIRES(mu) {
    int64_t ts = now_ns();
    TimelineArgs aborted = {
        {std::string(trace_format::kStatusArg), std::string(trace_format::kStatusAborted)},
        {std::string(trace_format::kReasonArg), std::string(reason)}};
    for (OpenOp& op : ops)
      if (op.generation != 0)
        close_all(op, std::max(ts, op.last_edge), aborted, /*past_limit=*/true);
  }

  // On the writer: the open spans as they are now, for the file's tail. Their rows' names go
  // into the queue (for good) if they were not there yet.
  void snapshot_open_spans(PackedEvents& out) KOLO_REQUIRES(mu) {
    static const TimelineArgs kOpen = {
        {std::string(trace_format::kStatusArg), std::string(trace_format::kStatusOpen)}};
    const int64_t now = now_ns();
    for (const OpenOp& op : ops) {
      if (op.generation == 0) continue;
      name_row(*op.row, *op.row_name);
      const int64_t ts = std::max(now, op.last_edge);  // Note [Shared clock reads]
      for (size_t i = 0; i < op.spans.size(); ++i) {
        const OpenSpan& span = op.spans[i];
        int64_t gap = static_cast<int64_t>(op.spans.size() - 1 - i);
        out.push(EventKind::kComplete, op.row->tid, span.ts_ns, nested_end(ts, gap) - span.ts_ns,
                 span.name, span.args, {&kOpen});
      }
    }
  }

  void note_write_status(const Status& st) KOLO_EXCLUDES(mu) {  // writer, or start/stop
    if (st.ok()) return;
    bool first;
    {
      MutexLock lock(mu);
      first = write_status.ok();
      if (first) write_status = st;
    }
    // Logged once, outside the lock: recording threads never wait for stderr.
    if (first) KOLO_LOG_ERROR(st.message() << "; later events may be lost");
  }

  // Each event is preceded by its separator: the header's last event has none after it.
  static void append_event(std::string& text, PackedEvents& events, size_t i, int pid) {
    text += ",\n";
    events.append_json(text, i, pid);
  }

  void writer_loop(TraceSink& out, int pid) KOLO_EXCLUDES(mu) {
    PackedEvents batch;  // swapped with `pending`: both keep their capacity
    batch.reserve(reserve_size(), reserve_size() * kTextBytesPerEvent);
    PackedEvents open_spans;
    std::string text;
    std::string tail;
    for (;;) {
      bool done;
      open_spans.clear();
      {
        MutexLock lock(mu);
        wake.wait_for(lock.native(), options.flush_interval, [&]() KOLO_REQUIRES(mu) {
          return stopping || pending.size() >= wake_threshold;
        });
        done = stopping;  // stop() queued its final events before setting this
        if (!done) snapshot_open_spans(open_spans);
        batch.swap(pending);
      }
      text.clear();
      for (size_t i = 0; i < batch.size(); ++i) {
        append_event(text, batch, i, pid);
        // A big batch (a burst, or a long flush interval) is written in pieces, so the text
        // buffer stays small however many events were queued.
        if (text.size() >= kWriteChunkBytes) {
          note_write_status(out.write(text, {}));
          text.clear();
        }
      }
      batch.clear();
      if (done) {
        final_text = std::move(text);  // stop() writes it with the statistics, then closes
        return;
      }
      tail.clear();
      for (size_t i = 0; i < open_spans.size(); ++i) append_event(tail, open_spans, i, pid);
      if (!text.empty() || !tail.empty() || wrote_tail) note_write_status(out.write(text, tail));
      wrote_tail = !tail.empty();
    }
  }

  // start()'s steps.
  Status check_start(const std::string& new_path, int new_rank) KOLO_REQUIRES(lifecycle_mu);
  void begin_recording(int new_rank, std::chrono::steady_clock::time_point steady0)
      KOLO_EXCLUDES(mu);
  Status start_writer(int new_rank) KOLO_REQUIRES(lifecycle_mu) KOLO_EXCLUDES(mu);

  // The writer's and stop()'s, never at the same time: the writer's last batch, read by stop()
  // after the join; whether the file holds a tail that the next write replaces.
  std::string final_text;
  bool wrote_tail = false;
};

TimelineArgs timeline_status_args(const Status& status) {
  TimelineArgs args = {
      {std::string(trace_format::kStatusArg), std::string(status_code_name(status.code()))}};
  if (!status.ok()) args.emplace_back(std::string(trace_format::kErrorArg), status.message());
  return args;
}

Timeline::Timeline() : Timeline(TimelineOptions{}) {}

Timeline::Timeline(TimelineOptions options) : impl_(std::make_shared<Impl>(options)) {}

Timeline::~Timeline() { stop(); }

Status Timeline::Impl::check_start(const std::string& new_path, int new_rank) {
  if (writer.joinable()) {
    return Status::PreconditionFailed("timeline: already started, writing '" + path +
                                      "'; call stop() before starting '" + new_path + "'");
  }
  if (new_path.empty()) return Status::InvalidArgument("timeline: path must not be empty");
  if (new_rank < 0) {
    return Status::InvalidArgument("timeline: rank must be >= 0, got " + std::to_string(new_rank));
  }
  if (options.max_queued_events < 1) {
    return Status::InvalidArgument("timeline: max_queued_events must be >= 1, got 0");
  }
  if (options.flush_interval.count() <= 0) {
    return Status::InvalidArgument("timeline: flush_interval must be > 0 ms, got " +
                                   std::to_string(options.flush_interval.count()) + " ms");
  }
  return Status::Ok();
}

void Timeline::Impl::begin_recording(int new_rank, std::chrono::steady_clock::time_point steady0) {
  MutexLock lock(mu);
  recording = true;
  stopping = false;
  rank = new_rank;
  t0 = steady0;
  wake_threshold = options.wake_writer_at > 0
                       ? options.wake_writer_at
                       : std::clamp<size_t>(options.max_queued_events / 2, 1, kDefaultWakeWriterAt);
  pending.clear();
  pending.reserve(reserve_size(), reserve_size() * kTextBytesPerEvent);
  rows.clear();
  ops.clear();
  free_slots.clear();
  first_generation = next_generation;
  // The markers track is named in the header.
  rows.emplace(std::string(), Row{trace_format::kMarkersTid, true, false, {}});
  next_tid = trace_format::kMarkersTid + 1;
  unmatched_ends = 0;
  dropped.store(0, std::memory_order_relaxed);
}

Status Timeline::Impl::start_writer(int new_rank) {
  try {
    writer = std::thread([this, out = sink.get(), new_rank] { writer_loop(*out, new_rank); });
  } catch (const std::system_error& e) {  // out of threads: leave the timeline stopped
    {
      MutexLock lock(mu);
      recording = false;
    }
    (void)sink->close({});
    sink.reset();
    return Status::Internal("timeline: cannot start the writer thread for '" + path +
                            "': " + e.what());
  }
  return Status::Ok();
}

Status Timeline::start(const std::string& path, int rank, bool mark_cycles) {
  Impl& m = *impl_;
  MutexLock lifecycle(m.lifecycle_mu);
  KOLO_RETURN_IF_ERROR(m.check_start(path, rank));
  KOLO_ASSIGN_OR_RETURN(m.sink, TraceSink::open(path));
  m.path = path;

  // ts = 0 on the steady clock and the wall clock, taken back to back.
  auto steady0 = std::chrono::steady_clock::now();
  auto wall0 = std::chrono::system_clock::now();
  int64_t wall_us =
      std::chrono::duration_cast<std::chrono::microseconds>(wall0.time_since_epoch()).count();
  {
    MutexLock lock(m.mu);
    m.write_status = Status::Ok();
  }
  // The header goes straight to the file: there is no writer yet.
  m.note_write_status(m.sink->write(trace_header(rank, wall_us), {}));
  m.begin_recording(rank, steady0);
  m.mark_cycles.store(mark_cycles, std::memory_order_relaxed);
  m.wrote_tail = false;
  KOLO_RETURN_IF_ERROR(m.start_writer(rank));
  m.active.store(true, std::memory_order_release);
  if (m.options.stop_on_signals) timeline_detail::register_for_signal_stop(impl_);
  return Status::Ok();
}

void Timeline::stop(std::string_view reason) { impl_->stop(reason); }

void Timeline::Impl::stop(std::string_view reason) {
  MutexLock lifecycle(lifecycle_mu);
  if (!writer.joinable()) return;
  active.store(false, std::memory_order_release);
  uint64_t unmatched;
  int pid;
  {
    MutexLock lock(mu);
    recording = false;
    queue_final_events(reason);
    unmatched = unmatched_ends;
    pid = rank;
    stopping = true;
  }
  wake.notify_one();
  writer.join();

  // The writer has exited: the file is ours again. Statistics last, so they count everything.
  nlohmann::json stats = {
      {"name", trace_format::kStatsEvent},
      {"ph", "M"},
      {"pid", pid},
      {"tid", trace_format::kMarkersTid},
      {"ts", 0},
      {"args",
       {{trace_format::kDroppedEventsArg, dropped.load(std::memory_order_relaxed)},
        {trace_format::kUnmatchedEndsArg, unmatched}}}};
  final_text += ",\n" + stats.dump();
  note_write_status(sink->close(final_text));
  final_text = {};
  sink.reset();
  MutexLock lock(mu);
  rows.clear();
  ops = {};
  free_slots = {};
  pending = PackedEvents();  // give the queue's memory back while stopped
}

bool Timeline::active() const { return impl_->active.load(std::memory_order_acquire); }

uint64_t Timeline::begin_op(std::string_view tensor, std::string_view kind, TimelineArgs args) {
  if (!active()) return 0;
  return impl_->begin_op(tensor, kind, std::move(args));
}

uint64_t Timeline::begin_op(std::string_view tensor, std::string_view kind, TimelineArgs args,
                            std::string_view first_phase) {
  if (!active()) return 0;
  return impl_->begin_op(tensor, kind, std::move(args), first_phase);
}

void Timeline::next(uint64_t op, std::string_view phase, TimelineArgs end_args,
                    TimelineArgs begin_args) {
  if (op == 0 || !active()) return;
  impl_->next(op, phase, std::move(end_args), std::move(begin_args));
}

void Timeline::begin(uint64_t op, std::string_view phase, TimelineArgs args) {
  if (op == 0 || !active()) return;
  impl_->begin(op, phase, std::move(args));
}

void Timeline::end(uint64_t op, TimelineArgs args) {
  if (op == 0 || !active()) return;
  impl_->end(op, std::move(args));
}

void Timeline::end_all(uint64_t op, const TimelineArgs& args, const TimelineArgs& outermost) {
  if (op == 0 || !active()) return;
  impl_->end_all(op, args, outermost);
}

void Timeline::instant(std::string_view tensor, std::string_view name, TimelineArgs args) {
  if (!active()) return;
  impl_->instant(EventKind::kInstant, tensor, name, std::move(args));
}

void Timeline::global_instant(std::string_view name, TimelineArgs args) {
  if (!active()) return;
  impl_->instant(EventKind::kGlobalInstant, {}, name, std::move(args));
}

void Timeline::counter(std::string_view name, TimelineArgs values) {
  if (!active()) return;
  impl_->instant(EventKind::kCounter, {}, name, std::move(values));
}

void Timeline::mark_cycle() {
  if (!active() || !impl_->mark_cycles.load(std::memory_order_relaxed)) return;
  impl_->instant(EventKind::kGlobalInstant, {}, trace_format::kCycleMarker, {});
}

uint64_t Timeline::dropped_events() const { return impl_->dropped.load(std::memory_order_relaxed); }

Status Timeline::status() const {
  MutexLock lock(impl_->mu);
  return impl_->write_status;
}

}  // namespace kolo
