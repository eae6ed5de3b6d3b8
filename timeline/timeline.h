// Timeline: records operations and their phases as Chrome trace JSON (the "Trace Event Format"),
// which Perfetto and chrome://tracing open. One file per rank; `kolo-trace merge` combines them.
//
// Layout of a file: a JSON array of events. pid = rank (one process track per rank, named
// "rank N"); tid = one thread track per tensor name (named after the tensor) plus track 0 for
// cycle markers. Phases are spans ("ph":"B"/"E") named QUEUE, NEGOTIATE, WAIT_FOR_DATA,
// MEMCPY_IN_FUSION, the backend's op (e.g. "TCP_ALLREDUCE"), MEMCPY_OUT_FUSION, CALLBACK; the
// outermost span on a tensor's track is the operation itself (e.g. "ALLREDUCE") with args
// (bytes, dtype, shape, backend, fused tensor count). A metadata event records the wall-clock
// time of the trace's time zero so that merge can align clocks across ranks.
//
// Thread-safety: every method may be called from any thread. Recording methods never block on
// I/O: they append to an in-memory queue that a writer thread drains. Memory is bounded: past
// the queue limit, events are dropped and counted (the count is written at stop()).
// The file is valid JSON after stop() (or destruction); if the process dies first, the file is
// an unterminated array, which both viewers accept.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kolo/status.h"

namespace kolo {

// Key/value arguments shown on a span. Values are written as JSON strings unless they parse
// as numbers (then as numbers).
using TimelineArgs = std::vector<std::pair<std::string, std::string>>;

class Timeline {
 public:
  Timeline();
  ~Timeline();  // stop()s
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Creates (truncates) `path` and starts recording for `rank`. Fails with IoError naming the
  // path when it cannot be opened, PreconditionFailed when already started.
  Status start(const std::string& path, int rank, bool mark_cycles = false);
  // Flushes every queued event, terminates the JSON array and closes the file. Idempotent.
  void stop();
  // Cheap (one atomic load): callers test it before building arguments.
  bool active() const;

  // Opens a span named `phase` on the track of `tensor`. Spans on one track nest.
  void begin(std::string_view tensor, std::string_view phase, TimelineArgs args = {});
  // Closes the innermost open span on the track of `tensor`; args are merged into it.
  void end(std::string_view tensor, TimelineArgs args = {});
  // An instant event on the track of `tensor` (or the markers track when tensor is empty).
  void instant(std::string_view tensor, std::string_view name, TimelineArgs args = {});
  // A "CYCLE_START" instant on the markers track; a no-op unless started with mark_cycles.
  void mark_cycle();

  // Events dropped because the queue was full since start().
  uint64_t dropped_events() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo
