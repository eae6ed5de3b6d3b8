#include "timeline/timeline.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "common/logging.h"
#include "timeline/signal_stop.h"
#include "timeline/trace_event.h"
#include "timeline/trace_format.h"
#include "timeline/trace_sink.h"

namespace kolo {

using timeline_detail::EventKind;
using timeline_detail::TraceEvent;
using timeline_detail::TraceSink;

namespace {

// Batches of this many events keep the two queue vectors small (they are reused, so steady
// state allocates nothing for them) while costing one writer wake-up per few thousand events.
constexpr size_t kDefaultWakeWriterAt = 4096;

// The writer formats into a buffer and writes it once it holds this much (or the batch ends).
constexpr size_t kWriteChunkBytes = 1 << 20;

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

// `more` wins over `args` for a key both have.
void add_args(TimelineArgs& args, TimelineArgs more) {
  for (auto& [key, value] : more) {
    // Init-capture: Clang 14 (the checking builds') cannot capture a structured binding.
    auto it = std::find_if(args.begin(), args.end(),
                           [&k = key](const auto& kv) { return kv.first == k; });
    if (it != args.end()) {
      it->second = std::move(value);
    } else {
      args.emplace_back(std::move(key), std::move(value));
    }
  }
}

struct Track {
  int tid;
  bool named = false;          // its thread_name record has been queued
  std::vector<OpenSpan> open;  // innermost last
  // detach()'s groups of spans, by token: open, but off the stack (innermost last each).
  std::map<uint64_t, std::vector<OpenSpan>> detached;
};

}  // namespace

// Note [Timeline queue]
// Recording threads and the writer thread share one vector of events under `mu`. A recording
// call holds the lock only to look up its track, stamp the time and push one event: no I/O, no
// syscall in the common case. A begin() queues nothing: it pushes the span on its track's stack
// of open spans, and end() queues the complete event. The writer swaps the whole vector out
// under the lock (copying the open spans too, as the file's replaceable tail) and formats and
// writes the batch without it, so recording never waits for the file. The writer is woken when
// the queue reaches wake_writer_at (one notify per batch, not per event) or by its flush
// interval, whichever comes first.
struct Timeline::Impl final : timeline_detail::SignalStoppable {
  explicit Impl(TimelineOptions o) : options(o) {}

  void stop_for_signal(std::string_view reason) override { stop(reason); }
  void stop(std::string_view reason);

  const TimelineOptions options;
  std::atomic<bool> active{false};
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> mark_cycles{false};  // set by start() before `active`

  // Serialises start() and stop(); never taken by recording calls.
  std::mutex lifecycle_mu;
  // Guarded by lifecycle_mu. `sink` and `path` are set by start() before the writer thread
  // starts and reset by stop() after it is joined; in between only the writer uses `sink`.
  std::thread writer;
  std::unique_ptr<TraceSink> sink;
  std::string path;

  std::mutex mu;
  std::condition_variable wake;
  // Guarded by mu:
  bool recording = false;
  bool stopping = false;
  int rank = 0;
  size_t wake_threshold = 1;
  std::chrono::steady_clock::time_point t0;
  std::vector<TraceEvent> pending;
  std::unordered_map<std::string, Track, StringHash, std::equal_to<>> tracks;
  int next_tid = trace_format::kMarkersTid + 1;
  uint64_t next_token = 1;
  std::unordered_map<uint64_t, std::string> detached_tracks;  // token -> its track's tensor
  uint64_t unmatched_ends = 0;
  Status write_status;

  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t0)
        .count();
  }

  // REQUIRES(mu). Finds the track of `tensor`, creating it on first use: ids are assigned in
  // order of first use and never change while recording.
  Track& track_for(std::string_view tensor) {
    auto it = tracks.find(tensor);
    if (it != tracks.end()) return it->second;
    int tid = next_tid++;
    return tracks.emplace(std::string(tensor), Track{tid, false, {}, {}}).first->second;
  }

  // REQUIRES(mu). Queues a kept event of `track`, preceded by the track's name the first time.
  // The name bypasses the limit (a track must never stay unlabelled), but only comes with a kept
  // event, so it adds at most one record per track that appears in the file.
  void push(Track& track, std::string_view tensor, TraceEvent event) {
    if (!track.named) {
      track.named = true;
      pending.push_back(
          TraceEvent{EventKind::kThreadName, track.tid, 0, 0, std::string(tensor), {}});
    }
    pending.push_back(std::move(event));
    if (pending.size() == wake_threshold) wake.notify_one();
  }

  // Room for a batch and the events recorded while it is being taken (capped: the limit may be
  // "unbounded"). Set before the writer starts, so the writer may read it without the lock.
  size_t reserve_size() const {
    return 2 * std::min({options.max_queued_events, wake_threshold, size_t{1} << 20});
  }

  bool has_room() const { return pending.size() < options.max_queued_events; }  // REQUIRES(mu)

  // REQUIRES(mu). Queues `event` when there is room, else counts it as dropped.
  void push_or_drop(Track& track, std::string_view tensor, TraceEvent event) {
    if (has_room()) {
      push(track, tensor, std::move(event));
    } else {
      dropped.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // When several nested spans of a track close at one instant (a failure, stop(), a flush with
  // spans open), each enclosing span ends 1 ns after the one inside it. Viewers that split
  // complete events into begin/end pairs (speedscope) order equal end times by start time,
  // which would end the parent before its child and leave the child's end unmatched.
  static int64_t nested_end(int64_t ts, int64_t levels_inside) { return ts + levels_inside; }

  // REQUIRES(mu). Closes the innermost span of `stack` (track.open or one of its detached
  // groups) at `ts`, with `more` args. past_limit: queued even when the queue is full (stop()'s
  // final events).
  void close_span(Track& track, std::vector<OpenSpan>& stack, std::string_view tensor, int64_t ts,
                  TimelineArgs more, bool past_limit = false) {
    OpenSpan span = std::move(stack.back());
    stack.pop_back();
    add_args(span.args, std::move(more));
    TraceEvent event{EventKind::kComplete, track.tid,           span.ts_ns, ts - span.ts_ns,
                     std::move(span.name), std::move(span.args)};
    if (past_limit) {
      push(track, tensor, std::move(event));
    } else {
      push_or_drop(track, tensor, std::move(event));
    }
  }

  // REQUIRES(mu). Closes every span of `stack`, innermost first, at `ts` (nested_end), the
  // outermost with `outermost` args too.
  void close_all(Track& track, std::vector<OpenSpan>& stack, std::string_view tensor, int64_t ts,
                 const TimelineArgs& args, bool past_limit, const TimelineArgs& outermost = {}) {
    for (int64_t gap = 0; !stack.empty(); ++gap) {
      TimelineArgs more = args;
      if (stack.size() == 1) add_args(more, outermost);
      close_span(track, stack, tensor, nested_end(ts, gap), std::move(more), past_limit);
    }
  }

  void begin(std::string_view tensor, std::string_view name, TimelineArgs&& args) {
    std::lock_guard<std::mutex> lock(mu);
    if (!recording) return;  // stopped between the caller's active() check and here
    track_for(tensor).open.push_back(OpenSpan{std::string(name), now_ns(), std::move(args)});
  }

  void end(std::string_view tensor, TimelineArgs&& args) {
    std::lock_guard<std::mutex> lock(mu);
    if (!recording) return;
    Track& track = track_for(tensor);
    if (track.open.empty()) {
      ++unmatched_ends;
      return;
    }
    close_span(track, track.open, tensor, now_ns(), std::move(args));
  }

  void end_all(std::string_view tensor, const TimelineArgs& args) {
    std::lock_guard<std::mutex> lock(mu);
    if (!recording) return;
    Track& track = track_for(tensor);
    close_all(track, track.open, tensor, now_ns(), args, /*past_limit=*/false);
  }

  uint64_t detach(std::string_view tensor) {
    std::lock_guard<std::mutex> lock(mu);
    if (!recording) return 0;
    Track& track = track_for(tensor);
    if (track.open.empty()) return 0;
    const uint64_t token = next_token++;
    track.detached.emplace(token, std::move(track.open));
    track.open.clear();
    detached_tracks.emplace(token, std::string(tensor));
    return token;
  }

  void end_detached(uint64_t token, const TimelineArgs& args, const TimelineArgs& outermost) {
    std::lock_guard<std::mutex> lock(mu);
    if (!recording) return;
    auto it = detached_tracks.find(token);
    if (it == detached_tracks.end()) return;
    const std::string tensor = std::move(it->second);
    detached_tracks.erase(it);
    Track& track = track_for(tensor);
    auto group = track.detached.find(token);
    if (group == track.detached.end()) return;
    close_all(track, group->second, tensor, now_ns(), args, /*past_limit=*/false, outermost);
    track.detached.erase(group);
  }

  void instant(EventKind kind, std::string_view tensor, std::string_view name,
               TimelineArgs&& args) {
    std::lock_guard<std::mutex> lock(mu);
    if (!recording) return;
    Track& track = track_for(tensor);
    push_or_drop(track, tensor,
                 TraceEvent{kind, track.tid, now_ns(), 0, std::string(name), std::move(args)});
  }

  // REQUIRES(mu), from stop(): closes the spans still open, innermost first on each track, past
  // the queue's limit (they are few: one per phase of each operation in flight).
  void queue_final_events(std::string_view reason) {
    int64_t ts = now_ns();
    TimelineArgs aborted = {
        {std::string(trace_format::kStatusArg), std::string(trace_format::kStatusAborted)},
        {std::string(trace_format::kReasonArg), std::string(reason)}};
    for (auto& [tensor, track] : tracks) {
      close_all(track, track.open, tensor, ts, aborted, /*past_limit=*/true);
      for (auto& [token, stack] : track.detached)
        close_all(track, stack, tensor, ts, aborted, /*past_limit=*/true);
      track.detached.clear();
    }
    detached_tracks.clear();
  }

  // REQUIRES(mu), on the writer: the open spans as they are now, for the file's tail. Their
  // tracks' names go into the queue (for good) if they were not there yet.
  void snapshot_open_spans(std::vector<TraceEvent>& out) {
    int64_t ts = now_ns();
    for (auto& [tensor, track] : tracks) {
      snapshot_stack(track, track.open, tensor, ts, out);
      for (const auto& [token, stack] : track.detached)
        snapshot_stack(track, stack, tensor, ts, out);
    }
  }

  // REQUIRES(mu). snapshot_open_spans() of one stack of spans of `track`.
  void snapshot_stack(Track& track, const std::vector<OpenSpan>& stack, const std::string& tensor,
                      int64_t ts, std::vector<TraceEvent>& out) {
    for (size_t i = 0; i < stack.size(); ++i) {
      const OpenSpan& span = stack[i];
      int64_t gap = static_cast<int64_t>(stack.size() - 1 - i);
      if (!track.named) {
        track.named = true;
        pending.push_back(
            TraceEvent{EventKind::kThreadName, track.tid, 0, 0, std::string(tensor), {}});
      }
      TraceEvent e{EventKind::kComplete,
                   track.tid,
                   span.ts_ns,
                   nested_end(ts, gap) - span.ts_ns,
                   span.name,
                   span.args};
      add_args(e.args,
               {{std::string(trace_format::kStatusArg), std::string(trace_format::kStatusOpen)}});
      out.push_back(std::move(e));
    }
  }

  void note_write_status(const Status& st) {  // writer thread, or start/stop without writer
    if (st.ok()) return;
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu);
      first = write_status.ok();
      if (first) write_status = st;
    }
    // Logged once, outside the lock: recording threads never wait for stderr.
    if (first) KOLO_LOG_ERROR(st.message() << "; later events may be lost");
  }

  // Each event is preceded by its separator: the header's last event has none after it.
  static void append_event(std::string& text, const TraceEvent& e, int pid) {
    text += ",\n";
    timeline_detail::append_event_json(text, e, pid);
  }

  void writer_loop(int pid) {
    std::vector<TraceEvent> batch;  // swapped with `pending`: both keep their capacity
    batch.reserve(reserve_size());
    std::vector<TraceEvent> open_spans;
    std::string text;
    std::string tail;
    for (;;) {
      bool done;
      open_spans.clear();
      {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait_for(lock, options.flush_interval,
                      [&] { return stopping || pending.size() >= wake_threshold; });
        done = stopping;  // stop() queued its final events before setting this
        if (!done) snapshot_open_spans(open_spans);
        batch.swap(pending);
      }
      text.clear();
      for (const TraceEvent& e : batch) {
        append_event(text, e, pid);
        // A big batch (a burst, or a long flush interval) is written in pieces, so the text
        // buffer stays small however many events were queued.
        if (text.size() >= kWriteChunkBytes) {
          note_write_status(sink->write(text, {}));
          text.clear();
        }
      }
      batch.clear();
      if (done) {
        final_text = std::move(text);  // stop() writes it with the statistics, then closes
        return;
      }
      tail.clear();
      for (const TraceEvent& e : open_spans) append_event(tail, e, pid);
      if (!text.empty() || !tail.empty() || wrote_tail) note_write_status(sink->write(text, tail));
      wrote_tail = !tail.empty();
    }
  }

  std::string final_text;   // writer's last batch; read by stop() after the join
  bool wrote_tail = false;  // writer only: the file holds a tail that the next write replaces
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

Status Timeline::start(const std::string& path, int rank, bool mark_cycles) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lifecycle(m.lifecycle_mu);
  if (m.writer.joinable()) {
    return Status::PreconditionFailed("timeline: already started, writing '" + m.path +
                                      "'; call stop() before starting '" + path + "'");
  }
  if (path.empty()) return Status::InvalidArgument("timeline: path must not be empty");
  if (rank < 0) {
    return Status::InvalidArgument("timeline: rank must be >= 0, got " + std::to_string(rank));
  }
  if (m.options.max_queued_events < 1) {
    return Status::InvalidArgument("timeline: max_queued_events must be >= 1, got 0");
  }
  if (m.options.flush_interval.count() <= 0) {
    return Status::InvalidArgument("timeline: flush_interval must be > 0 ms, got " +
                                   std::to_string(m.options.flush_interval.count()) + " ms");
  }
  KOLO_ASSIGN_OR_RETURN(m.sink, TraceSink::open(path));
  m.path = path;

  // ts = 0 on the steady clock and the wall clock, taken back to back.
  auto steady0 = std::chrono::steady_clock::now();
  auto wall0 = std::chrono::system_clock::now();
  int64_t wall_us =
      std::chrono::duration_cast<std::chrono::microseconds>(wall0.time_since_epoch()).count();

  // The header goes straight to the file (no writer yet): names first, so viewers label tracks.
  // Metadata carry "ts": 0 although they have no time: speedscope rejects events without it.
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

  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.write_status = Status::Ok();
  }
  m.note_write_status(m.sink->write(header, {}));

  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.recording = true;
    m.stopping = false;
    m.rank = rank;
    m.t0 = steady0;
    m.wake_threshold =
        m.options.wake_writer_at > 0
            ? m.options.wake_writer_at
            : std::clamp<size_t>(m.options.max_queued_events / 2, 1, kDefaultWakeWriterAt);
    m.pending.clear();
    m.pending.reserve(m.reserve_size());
    m.tracks.clear();
    m.detached_tracks.clear();
    // The markers track is named in the header.
    m.tracks.emplace(std::string(), Track{trace_format::kMarkersTid, true, {}, {}});
    m.next_tid = trace_format::kMarkersTid + 1;
    m.unmatched_ends = 0;
    m.dropped.store(0, std::memory_order_relaxed);
  }
  m.mark_cycles.store(mark_cycles, std::memory_order_relaxed);
  m.wrote_tail = false;
  try {
    m.writer = std::thread([&m, rank] { m.writer_loop(rank); });
  } catch (const std::system_error& e) {  // out of threads: leave the timeline stopped
    {
      std::lock_guard<std::mutex> lock(m.mu);
      m.recording = false;
    }
    (void)m.sink->close({});
    m.sink.reset();
    return Status::Internal("timeline: cannot start the writer thread for '" + path +
                            "': " + e.what());
  }
  m.active.store(true, std::memory_order_release);
  if (m.options.stop_on_signals) timeline_detail::register_for_signal_stop(impl_);
  return Status::Ok();
}

void Timeline::stop(std::string_view reason) { impl_->stop(reason); }

void Timeline::Impl::stop(std::string_view reason) {
  Impl& m = *this;
  std::lock_guard<std::mutex> lifecycle(m.lifecycle_mu);
  if (!m.writer.joinable()) return;
  m.active.store(false, std::memory_order_release);
  uint64_t unmatched;
  int rank;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.recording = false;
    m.queue_final_events(reason);
    unmatched = m.unmatched_ends;
    rank = m.rank;
    m.stopping = true;
  }
  m.wake.notify_one();
  m.writer.join();

  // The writer has exited: the file is ours again. Statistics last, so they count everything.
  nlohmann::json stats = {
      {"name", trace_format::kStatsEvent},
      {"ph", "M"},
      {"pid", rank},
      {"tid", trace_format::kMarkersTid},
      {"ts", 0},
      {"args",
       {{trace_format::kDroppedEventsArg, m.dropped.load(std::memory_order_relaxed)},
        {trace_format::kUnmatchedEndsArg, unmatched}}}};
  m.final_text += ",\n" + stats.dump();
  m.note_write_status(m.sink->close(m.final_text));
  m.final_text = {};
  m.sink.reset();
  std::lock_guard<std::mutex> lock(m.mu);
  m.tracks.clear();
  m.detached_tracks.clear();
  m.pending = {};  // give the queue's memory back while stopped
}

bool Timeline::active() const { return impl_->active.load(std::memory_order_acquire); }

void Timeline::begin(std::string_view tensor, std::string_view phase, TimelineArgs args) {
  if (!active()) return;
  impl_->begin(tensor, phase, std::move(args));
}

void Timeline::end(std::string_view tensor, TimelineArgs args) {
  if (!active()) return;
  impl_->end(tensor, std::move(args));
}

void Timeline::end_all(std::string_view tensor, const TimelineArgs& args) {
  if (!active()) return;
  impl_->end_all(tensor, args);
}

uint64_t Timeline::detach(std::string_view tensor) {
  if (!active()) return 0;
  return impl_->detach(tensor);
}

void Timeline::end_detached(uint64_t token, const TimelineArgs& args,
                            const TimelineArgs& outermost) {
  if (token == 0 || !active()) return;
  impl_->end_detached(token, args, outermost);
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
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->write_status;
}

}  // namespace kolo
