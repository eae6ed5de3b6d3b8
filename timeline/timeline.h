// Timeline: records operations and their phases as Chrome trace JSON (the "Trace Event Format"),
// which Perfetto and chrome://tracing open. One file per rank; `kolo-trace merge` combines them.
//
// Layout of a file: a JSON array of events. pid = rank (one process track per rank, named
// "rank N"); tid = one thread track per tensor name (named after the tensor; ids assigned in
// order of first use, stable for the whole recording) plus track 0 "markers" for cycle markers.
// Phases are spans ("ph":"B"/"E") named QUEUE, NEGOTIATE, WAIT_FOR_DATA, MEMCPY_IN_FUSION, the
// backend's op (e.g. "TCP_ALLREDUCE"), MEMCPY_OUT_FUSION, CALLBACK; the outermost span on a
// tensor's track is the operation itself (e.g. "ALLREDUCE") with args (bytes, dtype, shape,
// backend, fused tensor count). Instants are "ph":"i". Timestamps ("ts") are microseconds (with
// nanosecond decimals) since start() on the steady clock. Metadata events (timeline/
// trace_format.h) record the wall-clock time of ts = 0, so that merge can align clocks across
// ranks, and, at stop(), how many events were dropped.
//
// Thread-safety: every method may be called from any thread, concurrently (destruction aside).
// Recording methods never block on I/O: they append to an in-memory queue (one short
// mutex-protected push) that a writer thread drains. Memory is bounded: past
// TimelineOptions::max_queued_events, begin and instant events are dropped and counted (the count
// is written at stop()); the end of a span whose begin was dropped is dropped with it, and the end
// of a span whose begin was kept is always kept, so spans in the file always nest. The file is
// valid JSON after stop() (or destruction); spans still open at stop() are closed there with the
// arg "unfinished": 1. If the process dies first, the file is an unterminated array, which both
// viewers and `kolo-trace` accept.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kolo/status.h"

namespace kolo {

// Key/value arguments shown on a span. Values are written as JSON numbers when the whole value
// parses as a finite number ("4096", "-1.5", "1e6"), otherwise as JSON strings (escaped; invalid
// UTF-8 is replaced).
using TimelineArgs = std::vector<std::pair<std::string, std::string>>;

struct TimelineOptions {
  // Events waiting for the writer thread. Past this, new spans and instants are dropped (and
  // counted). Ends of kept spans, and a track's name (queued with its first kept event), are
  // never dropped, so the queue can briefly hold this many plus one end per open span and one
  // name per new track. Must be >= 1.
  size_t max_queued_events = 256 * 1024;
  // The writer thread writes and flushes queued events at least this often (and sooner when the
  // queue reaches wake_writer_at), which bounds what a crash loses. Must be > 0.
  std::chrono::milliseconds flush_interval{100};
  // The writer thread is also woken as soon as this many events are queued; 0 means
  // min(4096, max_queued_events / 2). Larger batches mean fewer wake-ups; a value above
  // max_queued_events leaves only the flush interval (tests use that to make dropping
  // deterministic).
  size_t wake_writer_at = 0;
};

class Timeline {
 public:
  Timeline();
  explicit Timeline(TimelineOptions options);
  ~Timeline();  // stop()s
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Creates (truncates) `path` and starts recording for `rank`. Fails with InvalidArgument for
  // an empty path, a negative rank or invalid options; IoError naming the path when it cannot be
  // opened; PreconditionFailed when already started; Internal when the writer thread cannot be
  // created. A stopped timeline may be started again (the file is truncated again).
  Status start(const std::string& path, int rank, bool mark_cycles = false);
  // Flushes every queued event, terminates the JSON array and closes the file. Idempotent.
  // Blocks until the writer thread has finished (the only method that waits for I/O).
  void stop();
  // Cheap (one atomic load): callers test it before building arguments.
  bool active() const;

  // Opens a span named `phase` on the track of `tensor` (the markers track when tensor is
  // empty). Spans on one track nest.
  void begin(std::string_view tensor, std::string_view phase, TimelineArgs args = {});
  // Closes the innermost open span on the track of `tensor`; args are merged into it (the "E"
  // event carries them and the span's name). An end with no open span is ignored and counted.
  void end(std::string_view tensor, TimelineArgs args = {});
  // An instant event on the track of `tensor` (or the markers track when tensor is empty).
  void instant(std::string_view tensor, std::string_view name, TimelineArgs args = {});
  // A counter sample ("ph":"C"): viewers draw one track per `name` (per rank) with a series per
  // value, e.g. counter("autotune", {{"step_time_ms", "12.5"}}). Values should be numbers.
  void counter(std::string_view name, TimelineArgs values);
  // A "CYCLE_START" instant on the markers track; a no-op unless started with mark_cycles.
  void mark_cycle();

  // Events dropped because the queue was full since start().
  uint64_t dropped_events() const;
  // The first error writing the file since start() (e.g. disk full), OK otherwise. Recording
  // goes on after a write error; the events that could not be written are lost.
  Status status() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo
