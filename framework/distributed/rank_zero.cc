#include "framework/distributed/rank_zero.h"

#include <algorithm>
#include <cstdarg>
#include <vector>

#include "common/thread_annotations.h"
#include "kolo/kolo.h"

namespace kolo::fw {

namespace {

// One process-wide lock: loggers writing to the same FILE must not interleave lines. It guards
// the FILEs' output, which is not a member the analysis can name.
Mutex& print_mutex() {
  static Mutex mu;
  return mu;
}

// The longest root error message passed to the other ranks (a message is a line or two; the
// cap keeps a pathological one from becoming a large broadcast).
constexpr int32_t kMaxSharedMessage = 4096;

}  // namespace

bool RankLogger::enabled() const {
  const int in_set = options_.process_set.rank();
  return options_.every_rank ? in_set >= 0 : in_set == 0;
}

void RankLogger::line(std::string_view text) const {
  if (!enabled()) return;
  std::string out;
  const std::string prefix =
      options_.every_rank ? "[rank " + std::to_string(rank()) + "] " : std::string();
  size_t start = 0;
  do {
    const size_t end = std::min(text.find('\n', start), text.size());
    out += prefix;
    out.append(text.substr(start, end - start));
    out += '\n';
    start = end + 1;
  } while (start < text.size());
  MutexLock lock(print_mutex());
  std::fputs(out.c_str(), options_.out);
  std::fflush(options_.out);
}

void RankLogger::printf(const char* format, ...) const {
  if (!enabled()) return;
  std::va_list args;
  va_start(args, format);
  std::va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::vector<char> buffer(static_cast<size_t>(std::max(n, 0)) + 1);
  std::vsnprintf(buffer.data(), buffer.size(), format, args);
  va_end(args);
  std::string_view text(buffer.data(), static_cast<size_t>(std::max(n, 0)));
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  line(text);
}

Status share_root_outcome(const std::string& name, const Status& root_status, int root,
                          const std::string& what, const ProcessSet& process_set) {
  const bool is_root = process_set.rank() == root;
  int32_t header[3] = {1, 0, 0};  // ok, status code, message bytes
  if (is_root && !root_status.ok()) {
    header[0] = 0;
    header[1] = static_cast<int32_t>(root_status.code());
    header[2] = static_cast<int32_t>(
        std::min<size_t>(root_status.message().size(), static_cast<size_t>(kMaxSharedMessage)));
  }
  KOLO_RETURN_IF_ERROR(broadcast(name + ".ok", view_of(header, {3}), root, process_set));
  if (header[0] == 1) return Status::Ok();
  const int32_t length = std::clamp<int32_t>(header[2], 0, kMaxSharedMessage);
  std::string message(static_cast<size_t>(length), '\0');
  if (is_root) message = root_status.message().substr(0, static_cast<size_t>(length));
  if (length > 0) {
    KOLO_RETURN_IF_ERROR(broadcast(name + ".error",
                                   view_of(reinterpret_cast<uint8_t*>(message.data()), {length}),
                                   root, process_set));
  }
  if (is_root) return root_status;
  const bool known_code = header[1] > static_cast<int32_t>(StatusCode::kOk) &&
                          header[1] <= static_cast<int32_t>(StatusCode::kWorldChanged);
  const StatusCode code = known_code ? static_cast<StatusCode>(header[1]) : StatusCode::kIoError;
  const std::string of_set = process_set.is_global() ? "" : " of " + process_set.to_string();
  return Status(code, what + " on root rank " + std::to_string(root) + of_set + ": " + message);
}

Status run_on_root_first(const std::string& name, const std::function<Status()>& work, int root,
                         const ProcessSet& process_set) {
  Status outcome;
  if (process_set.rank() == root) {
    // An exception escaping here would skip the broadcast and leave the others waiting.
    try {
      outcome = work();
    } catch (const Error& error) {
      outcome = error.status();
    } catch (const std::exception& error) {
      outcome = Status::IoError("'" + name + "': " + error.what());
    }
  }
  return share_root_outcome(name, outcome, root, "'" + name + "' failed", process_set);
}

}  // namespace kolo::fw
