// The names that tie a Kolo timeline file to the tools that read it (`kolo-trace merge`,
// `kolo-trace summary`). Changing one is a file-format change: update both sides.
#pragma once

#include <string_view>

namespace kolo::trace_format {

// Track 0 of every rank holds cycle markers and tensor-less instants.
inline constexpr int kMarkersTid = 0;
inline constexpr std::string_view kMarkersTrackName = "markers";

// A sibling row's thread_name metadata ("<tensor> (2)": an operation that began while its
// tensor's row was held; Note [Timeline rows] in timeline/timeline.h) names its tensor in this
// arg, beside "name", and readers group a tensor's rows by it. A CALLBACK span names the
// operation whose handle completed with it and kOperationArg its kind.
inline constexpr std::string_view kTensorArg = "tensor";
inline constexpr std::string_view kOperationArg = "op";

// The handles' completions (waking the waiters, running the callbacks) are not part of the
// operation, which has ended by then: each is a CALLBACK span on a row of its own per
// Runtime, kCallbacksRow (after the set's prefix), where they follow one another. Its args
// name the tensor and the operation's kind.
inline constexpr std::string_view kCallbacksRow = "kolo:callbacks";
inline constexpr std::string_view kCallbackPhase = "CALLBACK";

// Metadata ("ph":"M") event written at start(): args {kWallClockUsArg: integer microseconds
// since the Unix epoch (system clock) at ts = 0}. Merge shifts every file by it.
inline constexpr std::string_view kClockSyncEvent = "kolo_clock_sync";
inline constexpr std::string_view kWallClockUsArg = "wall_clock_us";

// Metadata event written at stop(): args {kDroppedEventsArg: n, kUnmatchedEndsArg: n}.
inline constexpr std::string_view kStatsEvent = "kolo_timeline_stats";
inline constexpr std::string_view kDroppedEventsArg = "dropped_events";
inline constexpr std::string_view kUnmatchedEndsArg = "unmatched_ends";

// Args of a span's outcome. kStatusArg is "OK", a StatusCode name (e.g. "PeerFailure"; then
// kErrorArg holds the message), kStatusOpen for a span still open at the last flush (the process
// died before closing it) or kStatusAborted (closed by stop(); kReasonArg says why).
inline constexpr std::string_view kStatusArg = "status";
inline constexpr std::string_view kErrorArg = "error";
inline constexpr std::string_view kReasonArg = "reason";
inline constexpr std::string_view kStatusOpen = "open";
inline constexpr std::string_view kStatusAborted = "aborted";

// Instants on the markers track.
inline constexpr std::string_view kCycleMarker = "CYCLE_START";
inline constexpr std::string_view kStepMarker = "STEP";  // args {kStepArg: n}: step n begins
inline constexpr std::string_view kStepArg = "step";

// The phase whose begin, compared across ranks, tells which rank arrived last.
inline constexpr std::string_view kNegotiatePhase = "NEGOTIATE";
// The phase that begins when the operation is submitted.
inline constexpr std::string_view kQueuePhase = "QUEUE";
// Added by `kolo-trace merge` on each rank's row of a tensor: when each rank submitted that
// operation (args {"rank": r, "lag_us": behind the first}); Note [Submission marks].
inline constexpr std::string_view kSubmittedMark = "SUBMITTED";

}  // namespace kolo::trace_format
