#include "coordinator/config.h"

#include <algorithm>
#include <cstdlib>

#include "common/logging.h"
#include "kolo/units.h"

namespace kolo::coord {

namespace {

Status bad(const char* var, const std::string& value, const std::string& accepted) {
  return Status::InvalidArgument(std::string(var) + "=" + value + " is invalid: expected " +
                                 accepted);
}

}  // namespace

Result<RuntimeConfig> config_from_env(const std::string& default_cpu_operations,
                                      const std::function<const char*(const char*)>& getenv_fn) {
  auto get = [&](const char* var) -> const char* {
    const char* v = getenv_fn ? getenv_fn(var) : std::getenv(var);
    return (v != nullptr && *v != '\0') ? v : nullptr;
  };
  RuntimeConfig c;
  c.cpu_operations = default_cpu_operations;
  const std::string kSize = "a size such as 64MiB, 1GB or 4096 (bytes)";
  const std::string kTime = "a duration such as 1ms, 500us, 2.5s or 60 (seconds)";

  if (const char* v = get("KOLO_FUSION_THRESHOLD")) {
    auto r = parse_size(v);
    if (!r.ok()) return bad("KOLO_FUSION_THRESHOLD", v, kSize);
    c.fusion_threshold = *r;
  }
  if (const char* v = get("KOLO_CYCLE_TIME")) {
    auto r = parse_duration(v);
    if (!r.ok()) return bad("KOLO_CYCLE_TIME", v, kTime);
    c.cycle_time = *r;
  }
  if (const char* v = get("KOLO_CACHE_CAPACITY")) {
    char* end = nullptr;
    long long n = std::strtoll(v, &end, 10);
    if (*end != '\0' || n < 0 || n > (1 << 24))
      return bad("KOLO_CACHE_CAPACITY", v, "an integer in [0, 16777216] (0 disables the cache)");
    c.cache_capacity = static_cast<uint64_t>(n);
  }
  if (const char* v = get("KOLO_TIMELINE")) c.timeline_path = v;
  if (const char* v = get("KOLO_TIMELINE_MARK_CYCLES")) {
    std::string s = v;
    if (s == "1" || s == "true" || s == "yes" || s == "on") c.timeline_mark_cycles = true;
    else if (s == "0" || s == "false" || s == "no" || s == "off") c.timeline_mark_cycles = false;
    else return bad("KOLO_TIMELINE_MARK_CYCLES", v, "1/true/yes/on or 0/false/no/off");
  }
  if (const char* v = get("KOLO_STALL_CHECK_TIME")) {
    auto r = parse_duration(v);
    if (!r.ok()) return bad("KOLO_STALL_CHECK_TIME", v, kTime + " (0 disables)");
    c.stall_check_time = *r;
  }
  if (const char* v = get("KOLO_STALL_SHUTDOWN_TIME")) {
    auto r = parse_duration(v);
    if (!r.ok()) return bad("KOLO_STALL_SHUTDOWN_TIME", v, kTime + " (0 disables)");
    c.stall_shutdown_time = *r;
  }
  if (const char* v = get("KOLO_OP_TIMEOUT")) {
    auto r = parse_duration(v);
    if (!r.ok() || r->count() <= 0) return bad("KOLO_OP_TIMEOUT", v, kTime + ", > 0");
    c.op_timeout = *r;
  }
  if (const char* v = get("KOLO_CPU_OPERATIONS")) {
    std::string s = v;
    if (s != "tcp" && s != "mpi") return bad("KOLO_CPU_OPERATIONS", v, "tcp or mpi");
    c.cpu_operations = s;
  }
  // The heartbeat must stay well inside the op timeout (a waiting peer would otherwise time
  // out on an idle one) and fine enough for the stall inspector to be punctual.
  auto hb = std::chrono::nanoseconds(std::chrono::milliseconds(200));
  hb = std::min(hb, c.op_timeout / 4);
  if (c.stall_check_time.count() > 0) hb = std::min(hb, c.stall_check_time / 4);
  if (c.stall_shutdown_time.count() > 0) hb = std::min(hb, c.stall_shutdown_time / 4);
  c.heartbeat = std::max(hb, std::chrono::nanoseconds(std::chrono::milliseconds(1)));

  KOLO_LOG_DEBUG("config: KOLO_FUSION_THRESHOLD=" << format_size(c.fusion_threshold)
                 << " KOLO_CYCLE_TIME=" << format_duration(c.cycle_time)
                 << " KOLO_CACHE_CAPACITY=" << c.cache_capacity
                 << " KOLO_STALL_CHECK_TIME=" << format_duration(c.stall_check_time)
                 << " KOLO_STALL_SHUTDOWN_TIME=" << format_duration(c.stall_shutdown_time)
                 << " KOLO_OP_TIMEOUT=" << format_duration(c.op_timeout)
                 << " KOLO_CPU_OPERATIONS=" << c.cpu_operations
                 << " KOLO_TIMELINE=" << c.timeline_path);
  return c;
}

}  // namespace kolo::coord
