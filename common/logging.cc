#include "common/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string_view>

#include "common/knobs.h"

namespace kolo {
namespace {

std::atomic<int> g_level{-1};
std::atomic<int> g_rank{-1};

// A bad KOLO_LOG_LEVEL is reported by init() and kolorun (KnobSet::read); logging itself must
// work before either, so it falls back to the default here.
LogLevel level_from_env() {
  const Knob& k = knob(KnobId::kLogLevel);
  const auto env = kolo_environment();
  auto it = env.find(std::string(k.name));
  Result<KnobValue> v =
      parse_knob(k, it == env.end() || it->second.empty() ? k.default_text : it->second);
  const std::string name = v.ok() ? std::get<std::string>(*v) : std::string(k.default_text);
  const auto levels = k.choices();
  const auto pos = std::find(levels.begin(), levels.end(), name) - levels.begin();
  return static_cast<LogLevel>(pos);
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
