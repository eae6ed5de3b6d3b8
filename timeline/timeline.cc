#include "timeline/timeline.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "common/logging.h"
#include "timeline/trace_event.h"
#include "timeline/trace_format.h"

namespace kolo {

using timeline_detail::EventKind;
using timeline_detail::TraceEvent;

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
  bool kept;  // false when its begin was dropped: its end is dropped too, so the file nests
};

struct Track {
  int tid;
  bool named = false;          // its thread_name record has been queued
  std::vector<OpenSpan> open;  // innermost last
};

}  // namespace

// Note [Timeline queue]
// Recording threads and the writer thread share one vector of events under `mu`. A recording
// call holds the lock only to look up its track, stamp the time and push one event: no I/O, no
// syscall in the common case. The writer swaps the whole vector out under the lock and formats
// and writes the batch without it, so recording never waits for the file. Taking the timestamp
// under the lock keeps each track's events in time order in the queue, which is what Chrome's
// B/E matching needs. The writer is woken when the queue reaches wake_writer_at (one notify
// per batch, not per event) or by its flush interval, whichever comes first.
struct Timeline::Impl {
  explicit Impl(TimelineOptions o) : options(o) {}

  const TimelineOptions options;
  std::atomic<bool> active{false};
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> mark_cycles{false};  // set by start() before `active`

  // Serialises start() and stop(); never taken by recording calls.
  std::mutex lifecycle_mu;
  // Guarded by lifecycle_mu. `file` and `path` are set by start() before the writer thread
  // starts and reset by stop() after it is joined; in between only the writer uses `file`.
  std::thread writer;
  std::FILE* file = nullptr;
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
    return tracks.emplace(std::string(tensor), Track{tid, false, {}}).first->second;
  }

  // REQUIRES(mu). Queues a kept event of `track`, preceded by the track's name the first time.
  // The name bypasses the limit (a track must never stay unlabelled), but only comes with a kept
  // event, so it adds at most one record per track that appears in the file.
  void push(Track& track, std::string_view tensor, TraceEvent event) {
    if (!track.named) {
      track.named = true;
      pending.push_back(TraceEvent{EventKind::kThreadName, track.tid, 0, std::string(tensor), {}});
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

  void record(EventKind kind, std::string_view tensor, std::string_view name, TimelineArgs&& args) {
    std::lock_guard<std::mutex> lock(mu);
    if (!recording) return;  // stopped between the caller's active() check and here
    int64_t ts = now_ns();
    Track& track = track_for(tensor);
    switch (kind) {
      case EventKind::kBegin: {
        bool kept = has_room();
        track.open.push_back(OpenSpan{std::string(name), kept});
        if (kept) {
          push(track, tensor, TraceEvent{kind, track.tid, ts, std::string(name), std::move(args)});
        } else {
          dropped.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      }
      case EventKind::kEnd: {
        if (track.open.empty()) {
          ++unmatched_ends;
          return;
        }
        OpenSpan span = std::move(track.open.back());
        track.open.pop_back();
        if (span.kept) {
          push(track, tensor,
               TraceEvent{kind, track.tid, ts, std::move(span.name), std::move(args)});
        } else {
          dropped.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      }
      case EventKind::kInstant:
      case EventKind::kThreadName:
      case EventKind::kCounter:
        if (has_room()) {
          push(track, tensor,
               TraceEvent{kind == EventKind::kCounter ? kind : EventKind::kInstant, track.tid, ts,
                          std::string(name), std::move(args)});
        } else {
          dropped.fetch_add(1, std::memory_order_relaxed);
        }
        break;
    }
  }

  // REQUIRES(mu), from stop(): closes the spans still open (innermost first on each track) with
  // "unfinished": 1, so the file nests even when an operation never completed.
  void queue_final_events() {
    int64_t ts = now_ns();
    for (auto& [name, track] : tracks) {
      while (!track.open.empty()) {  // innermost first, as nesting requires
        OpenSpan& span = track.open.back();
        if (span.kept) {
          pending.push_back(TraceEvent{EventKind::kEnd,
                                       track.tid,
                                       ts,
                                       std::move(span.name),
                                       {{std::string(trace_format::kUnfinishedArg), "1"}}});
        }
        track.open.pop_back();
      }
    }
  }

  void write_bytes(const std::string& bytes) {  // writer thread, or start/stop without writer
    if (bytes.empty()) return;
    size_t n = std::fwrite(bytes.data(), 1, bytes.size(), file);
    if (n != bytes.size() || std::fflush(file) != 0) {
      Status error =
          Status::IoError("timeline: writing '" + path + "' failed: " + std::strerror(errno));
      bool first;
      {
        std::lock_guard<std::mutex> lock(mu);
        first = write_status.ok();
        if (first) write_status = error;
      }
      // Logged once, outside the lock: recording threads never wait for stderr.
      if (first) KOLO_LOG_ERROR(error.message() << "; later events may be lost");
    }
  }

  void writer_loop(int pid) {
    std::vector<TraceEvent> batch;  // swapped with `pending`: both keep their capacity
    batch.reserve(reserve_size());
    std::string text;
    for (;;) {
      bool done;
      {
        std::unique_lock<std::mutex> lock(mu);
        wake.wait_for(lock, options.flush_interval,
                      [&] { return stopping || pending.size() >= wake_threshold; });
        batch.swap(pending);
        done = stopping;  // stop() queued its final events before setting this
      }
      text.clear();
      for (const TraceEvent& e : batch) {
        // Each event is preceded by its separator, so the file is always a valid prefix of
        // an array: a crash leaves "[ ... }" which readers complete with "]".
        text += ",\n";
        timeline_detail::append_event_json(text, e, pid);
        // A big batch (a burst, or a long flush interval) is written in pieces, so the text
        // buffer stays small however many events were queued.
        if (text.size() >= kWriteChunkBytes) {
          write_bytes(text);
          text.clear();
        }
      }
      write_bytes(text);
      batch.clear();
      if (done) return;
    }
  }
};

Timeline::Timeline() : Timeline(TimelineOptions{}) {}

Timeline::Timeline(TimelineOptions options) : impl_(std::make_unique<Impl>(options)) {}

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
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return Status::IoError("timeline: cannot open '" + path +
                           "' for writing: " + std::strerror(errno));
  }
  m.file = f;
  m.path = path;

  // ts = 0 on the steady clock and the wall clock, taken back to back.
  auto steady0 = std::chrono::steady_clock::now();
  auto wall0 = std::chrono::system_clock::now();
  int64_t wall_us =
      std::chrono::duration_cast<std::chrono::microseconds>(wall0.time_since_epoch()).count();

  // The header goes straight to the file (no writer yet): names first, so viewers label tracks.
  std::string header = "[\n";
  auto meta = [&](std::string_view name, int tid, const nlohmann::json& args, bool last) {
    nlohmann::json e = {{"name", name}, {"ph", "M"}, {"pid", rank}, {"tid", tid}, {"args", args}};
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
  m.write_bytes(header);

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
    // The markers track is named in the header.
    m.tracks.emplace(std::string(), Track{trace_format::kMarkersTid, true, {}});
    m.next_tid = trace_format::kMarkersTid + 1;
    m.unmatched_ends = 0;
    m.dropped.store(0, std::memory_order_relaxed);
  }
  m.mark_cycles.store(mark_cycles, std::memory_order_relaxed);
  try {
    m.writer = std::thread([&m, rank] { m.writer_loop(rank); });
  } catch (const std::system_error& e) {  // out of threads: leave the timeline stopped
    {
      std::lock_guard<std::mutex> lock(m.mu);
      m.recording = false;
    }
    std::fclose(m.file);
    m.file = nullptr;
    return Status::Internal("timeline: cannot start the writer thread for '" + path +
                            "': " + e.what());
  }
  m.active.store(true, std::memory_order_release);
  return Status::Ok();
}

void Timeline::stop() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lifecycle(m.lifecycle_mu);
  if (!m.writer.joinable()) return;
  m.active.store(false, std::memory_order_release);
  uint64_t unmatched;
  int rank;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.recording = false;
    m.queue_final_events();
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
      {"args",
       {{trace_format::kDroppedEventsArg, m.dropped.load(std::memory_order_relaxed)},
        {trace_format::kUnmatchedEndsArg, unmatched}}}};
  m.write_bytes(",\n" + stats.dump() + "\n]\n");
  if (std::fclose(m.file) != 0) {
    int err = errno;
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.write_status.ok()) {
      m.write_status =
          Status::IoError("timeline: closing '" + m.path + "' failed: " + std::strerror(err));
    }
  }
  m.file = nullptr;
  std::lock_guard<std::mutex> lock(m.mu);
  m.tracks.clear();
  m.pending = {};  // give the queue's memory back while stopped
}

bool Timeline::active() const { return impl_->active.load(std::memory_order_acquire); }

void Timeline::begin(std::string_view tensor, std::string_view phase, TimelineArgs args) {
  if (!active()) return;
  impl_->record(EventKind::kBegin, tensor, phase, std::move(args));
}

void Timeline::end(std::string_view tensor, TimelineArgs args) {
  if (!active()) return;
  impl_->record(EventKind::kEnd, tensor, {}, std::move(args));
}

void Timeline::instant(std::string_view tensor, std::string_view name, TimelineArgs args) {
  if (!active()) return;
  impl_->record(EventKind::kInstant, tensor, name, std::move(args));
}

void Timeline::counter(std::string_view name, TimelineArgs values) {
  if (!active()) return;
  impl_->record(EventKind::kCounter, {}, name, std::move(values));
}

void Timeline::mark_cycle() {
  if (!active() || !impl_->mark_cycles.load(std::memory_order_relaxed)) return;
  impl_->record(EventKind::kInstant, {}, "CYCLE_START", {});
}

uint64_t Timeline::dropped_events() const { return impl_->dropped.load(std::memory_order_relaxed); }

Status Timeline::status() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->write_status;
}

}  // namespace kolo
