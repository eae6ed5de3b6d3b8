// Leveled logging to stderr. Every line carries the level, rank, pid and thread id:
//   [kolo W rank 1 pid 4242 tid 4250] message
// KOLO_LOG_LEVEL (trace, debug, info, warning, error, off; default warning; common/knobs.h) is
// read once, lazily.
// Thread-safe: one write(2) per line, so lines from threads and ranks do not interleave.
#pragma once

#include <sstream>
#include <string>

namespace kolo {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError, kOff };

LogLevel log_level();
void set_log_level(LogLevel level);
// The rank shown in log lines; -1 (the default) prints "rank ?".
void set_log_rank(int rank);
void log_line(LogLevel level, const std::string& message);

}  // namespace kolo

#define KOLO_LOG(level, expr)                                        \
  do {                                                               \
    if (::kolo::LogLevel::level >= ::kolo::log_level()) {            \
      std::ostringstream kolo_log_os_;                               \
      kolo_log_os_ << expr;                                          \
      ::kolo::log_line(::kolo::LogLevel::level, kolo_log_os_.str()); \
    }                                                                \
  } while (0)
#define KOLO_LOG_DEBUG(expr) KOLO_LOG(kDebug, expr)
#define KOLO_LOG_INFO(expr) KOLO_LOG(kInfo, expr)
#define KOLO_LOG_WARNING(expr) KOLO_LOG(kWarning, expr)
#define KOLO_LOG_ERROR(expr) KOLO_LOG(kError, expr)
