// The names that tie a Kolo timeline file to the tools that read it (`kolo-trace merge`,
// `kolo-trace summary`). Changing one is a file-format change: update both sides.
#pragma once

#include <string_view>

namespace kolo::trace_format {

// Track 0 of every rank holds cycle markers and tensor-less instants.
inline constexpr int kMarkersTid = 0;
inline constexpr std::string_view kMarkersTrackName = "markers";

// Metadata ("ph":"M") event written at start(): args {kWallClockUsArg: integer microseconds
// since the Unix epoch (system clock) at ts = 0}. Merge shifts every file by it.
inline constexpr std::string_view kClockSyncEvent = "kolo_clock_sync";
inline constexpr std::string_view kWallClockUsArg = "wall_clock_us";

// Metadata event written at stop(): args {kDroppedEventsArg: n, kUnmatchedEndsArg: n}.
inline constexpr std::string_view kStatsEvent = "kolo_timeline_stats";
inline constexpr std::string_view kDroppedEventsArg = "dropped_events";
inline constexpr std::string_view kUnmatchedEndsArg = "unmatched_ends";

// Arg on the "E" events that stop() writes for spans still open.
inline constexpr std::string_view kUnfinishedArg = "unfinished";

// The phase whose begin, compared across ranks, tells which rank arrived last.
inline constexpr std::string_view kNegotiatePhase = "NEGOTIATE";

}  // namespace kolo::trace_format
