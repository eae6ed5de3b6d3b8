#include "common/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace kolo {
namespace {

std::atomic<int> g_level{-1};
std::atomic<int> g_rank{-1};

LogLevel level_from_env() {
  const char* v = std::getenv("KOLO_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kWarning;
  std::string_view s(v);
  if (s == "trace") return LogLevel::kTrace;
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warning" || s == "warn") return LogLevel::kWarning;
  if (s == "error") return LogLevel::kError;
  if (s == "off" || s == "none") return LogLevel::kOff;
  return LogLevel::kWarning;
}

}  // namespace

LogLevel log_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    level = static_cast<int>(level_from_env());
    g_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
void set_log_rank(int rank) { g_rank.store(rank); }

void log_line(LogLevel level, const std::string& message) {
  static constexpr char kLetters[] = "TDIWE";
  int rank = g_rank.load(std::memory_order_relaxed);
  std::string line = "[kolo ";
  line += kLetters[static_cast<int>(level) < 5 ? static_cast<int>(level) : 4];
  line += rank >= 0 ? " rank " + std::to_string(rank) : std::string(" rank ?");
  line += " pid " + std::to_string(::getpid());
  line += " tid " + std::to_string(static_cast<long>(::syscall(SYS_gettid)));
  line += "] ";
  line += message;
  line += '\n';
  // One write call per line keeps concurrent lines whole.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace kolo
