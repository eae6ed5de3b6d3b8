// TraceSink: the file a timeline writes, kept valid JSON after every write so that a trace
// survives its process being killed (SIGKILL, OOM) up to the last flush.
//
// A trace is a JSON array: "[", then events each preceded by ",\n" (the header's first event
// by nothing), then "]". The sink keeps the closing bracket on disk after every write: each
// write() puts its events where the bracket was and a new bracket after them. Between the
// events and the bracket, write() may also put a `tail`: events that describe the present
// (spans still open) and that the next write replaces, so a killed process leaves its open
// spans in the file as they were at its last flush. When a tail shrinks, the bytes it leaves
// behind are blanked with spaces before the bracket (JSON whitespace), so no stale text can
// follow the bracket even if the process dies between two writes. The one window without a
// bracket is inside a single write(2) call.
//
// A path ending in ".gz" is written as gzip (GzipSink in trace_sink.cc): flushed at every
// write, but without tail or bracket until close(), since a compressed stream cannot be
// rewritten in place.
//
// Ownership: owns its file descriptor. Thread-safety: none; one writer at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kolo/status.h"

namespace kolo::timeline_detail {

class TraceSink {
 public:
  // Creates (truncates) `path`. IoError naming the path when it cannot be opened.
  static Result<std::unique_ptr<TraceSink>> open(const std::string& path);

  virtual ~TraceSink() = default;

  // Appends `events` for good, then `tail` (replaced by the next write or close), then the
  // closing bracket. IoError naming the path on failure (disk full, ...).
  virtual Status write(std::string_view events, std::string_view tail) = 0;

  // Appends `events` and the bracket, drops the last tail, and closes the file. Further calls
  // fail with PreconditionFailed.
  virtual Status close(std::string_view events) = 0;
};

}  // namespace kolo::timeline_detail
