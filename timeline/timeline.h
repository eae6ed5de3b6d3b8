// Timeline: records operations and their phases as Chrome trace JSON (the "Trace Event Format"),
// which Chromium's DevTools, Perfetto and speedscope open. One file per rank; `kolo-trace
// merge` combines them.
//
// Layout of a file: a JSON array of events. pid = rank (one process track per rank, named
// "rank N"); tid = one thread track ("row") per tensor name (named after the tensor; ids
// assigned in order of first use, stable for the whole recording) plus track 0 "markers".
// Every span is a complete event ("ph":"X", ts and dur) written when it ends, carrying the args
// of its begin and its end: viewers show X events' args, and an X needs no begin/end matching
// (DevTools matches "B"/"E" across threads and mis-draws interleaved rows).
//
// Note [Timeline rows]. Spans belong to operations: begin_op() opens an operation's own span
// (named after it, e.g. "ALLREDUCE", with args bytes, dtype, shape, backend, fused, status)
// and returns a token; its phases (QUEUE, NEGOTIATE, WAIT_FOR_DATA, MEMCPY_IN_FUSION, the
// backend's op such as "TCP_ALLREDUCE", MEMCPY_OUT_FUSION) open and close inside it through the
// token, each operation with a stack of its own. An operation holds its row from begin_op()
// until its own span closes; one that begins while its tensor's row is held (the previous
// operation of that name still runs: on a GPU, or resubmitted before it completed) goes on the
// first free sibling row "<tensor> (2)", "<tensor> (3)"..., whose thread_name record names the
// tensor too (args "tensor"). So on every row spans nest or follow one another, never overlap
// partly, which is what viewers draw right. Span names are phases or operation kinds only;
// everything else is an arg.
// Instants are "ph":"i" ("s":"t" on a tensor's row, "s":"g" across every row for markers).
// Timestamps ("ts", "dur") are microseconds (with nanosecond decimals) since start() on the
// steady clock. Metadata events (timeline/trace_format.h) record the wall-clock time of ts = 0,
// so that merge can align clocks across ranks, and, at stop(), how many events were dropped.
//
// Crash safety (timeline/trace_sink.h): the file is valid JSON after every flush. Spans open at
// a flush are written there with "status": "open" and the duration so far, and replaced at the
// next flush, so a killed process leaves them as of its last flush. stop(reason) closes the
// spans still open with "status": "aborted" and "reason".
//
// Thread-safety: every method may be called from any thread, concurrently (destruction aside);
// the calls on one operation's token must be ordered by the caller (they are: one thread at a
// time handles an operation). Recording methods never block on I/O: they append to an
// in-memory queue (one short mutex-protected push of a packed record, no allocation in steady
// state: Note [Packed events] in trace_event.cc) that a writer thread drains. Memory is
// bounded: past TimelineOptions::max_queued_events, spans and instants are dropped and counted
// (the count is written at stop()). Open spans are held apart from the queue.
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

// {"status": "OK"} or {"status": code name, "error": message}: a span's outcome
// (trace_format.h).
TimelineArgs timeline_status_args(const Status& status);

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
  // SIGTERM and SIGINT stop this timeline (open spans "aborted", reason the signal) before the
  // signal takes its course (timeline/signal_stop.h): for the one timeline of a Kolo process.
  bool stop_on_signals = false;
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
  // Closes the spans still open with "status": "aborted" and "reason": `reason`, flushes every
  // queued event, terminates the JSON array and closes the file. Idempotent. Blocks until the
  // writer thread has finished (the only method that waits for I/O).
  void stop(std::string_view reason = "the timeline was stopped");
  // Cheap (one atomic load): callers test it before building arguments.
  bool active() const;

  // Opens the span of an operation named `kind` (e.g. "ALLREDUCE") on the row of `tensor`, or
  // its first free sibling row (Note [Timeline rows]), and returns its token for the calls
  // below, from any thread. 0 when not recording: every call ignores a token of 0, and one of
  // an operation already ended or of an earlier recording.
  uint64_t begin_op(std::string_view tensor, std::string_view kind, TimelineArgs args = {});
  // begin_op() and begin(token, first_phase) in one call, both spans opening at the same
  // instant: one lock and one clock read instead of two (an operation that starts in a phase,
  // as a submission starts in QUEUE).
  uint64_t begin_op(std::string_view tensor, std::string_view kind, TimelineArgs args,
                    std::string_view first_phase);
  // Opens a span named `phase` inside the innermost open span of `op`.
  void begin(uint64_t op, std::string_view phase, TimelineArgs args = {});
  // end(op, end_args) then begin(op, phase, begin_args) in one call, the next phase beginning
  // at the instant the innermost span ends (one lock, one clock read): how an operation goes
  // from one phase to the next. When the span ended is the operation's own, the operation has
  // ended and no phase opens; an ended operation's token is ignored and counted as end() does.
  void next(uint64_t op, std::string_view phase, TimelineArgs end_args = {},
            TimelineArgs begin_args = {});
  // Closes the innermost open span of `op`; `args` are added to its begin's (replacing those of
  // the same key). Closing the operation's own span ends the operation and frees its row. An
  // end for an operation of this recording that has ended is ignored and counted.
  void end(uint64_t op, TimelineArgs args = {});
  // Closes every open span of `op`, innermost first, each with `args` added and the operation's
  // own with `outermost` added too: how an operation ends, failed or not.
  void end_all(uint64_t op, const TimelineArgs& args, const TimelineArgs& outermost = {});
  // An instant event on the track of `tensor` (or the markers track when tensor is empty).
  void instant(std::string_view tensor, std::string_view name, TimelineArgs args = {});
  // An instant on the markers track that viewers draw across every row ("s":"g").
  void global_instant(std::string_view name, TimelineArgs args = {});
  // A counter sample ("ph":"C"): viewers draw one track per `name` (per rank) with a series per
  // value, e.g. counter("autotune", {{"step_time_ms", "12.5"}}). Values should be numbers.
  void counter(std::string_view name, TimelineArgs values);
  // A "CYCLE_START" global instant; a no-op unless started with mark_cycles.
  void mark_cycle();

  // Events dropped because the queue was full since start().
  uint64_t dropped_events() const;
  // The first error writing the file since start() (e.g. disk full), OK otherwise. Recording
  // goes on after a write error; the events that could not be written are lost.
  Status status() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with the signal watcher, which holds it weakly
};

}  // namespace kolo
