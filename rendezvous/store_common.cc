#include "rendezvous/store_common.h"

#include <charconv>
#include <limits>

#include "rendezvous/store.h"

namespace kolo::store_internal {

Status validate_key(std::string_view op, std::string_view key) {
  if (key.empty()) return Status::InvalidArgument(std::string(op) + ": key must not be empty");
  if (key.find('\0') != std::string_view::npos)
    return Status::InvalidArgument(std::string(op) + ": key must not contain NUL bytes");
  if (key.size() > kMaxStoreKeyBytes)
    return Status::InvalidArgument(std::string(op) + ": key must be at most " +
                                   std::to_string(kMaxStoreKeyBytes) + " bytes, got " +
                                   std::to_string(key.size()));
  return Status::Ok();
}

Status validate_value(std::string_view op, std::string_view key, std::string_view value) {
  if (value.size() > kMaxStoreValueBytes)
    return Status::InvalidArgument(
        std::string(op) + "(" + std::string(key) + "): value must be at most " +
        std::to_string(kMaxStoreValueBytes) + " bytes, got " + std::to_string(value.size()));
  return Status::Ok();
}

Status validate_timeout(std::string_view op, std::chrono::milliseconds timeout) {
  if (timeout.count() < 0)
    return Status::InvalidArgument(std::string(op) + ": timeout must be >= 0 ms, got " +
                                   std::to_string(timeout.count()) + " ms");
  return Status::Ok();
}

Result<int64_t> parse_counter(std::string_view key, std::string_view text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    return Status::InvalidArgument("store add(" + std::string(key) +
                                   "): existing value is not a decimal int64 counter: \"" +
                                   std::string(text.substr(0, 64)) + "\"");
  return v;
}

Result<int64_t> checked_add(std::string_view key, int64_t current, int64_t delta) {
  int64_t out = 0;
  if (__builtin_add_overflow(current, delta, &out))
    return Status::InvalidArgument("store add(" + std::string(key) +
                                   "): " + std::to_string(current) + " + " + std::to_string(delta) +
                                   " overflows int64");
  return out;
}

std::string format_ms(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + "s";
  return std::to_string(d.count()) + "ms";
}

Status missing_keys_timeout(std::string_view op, std::chrono::milliseconds timeout,
                            const std::vector<std::string>& missing) {
  constexpr size_t kMaxNamed = 10;
  std::string msg = "store " + std::string(op) + " timed out after " + format_ms(timeout) +
                    ": missing key" + (missing.size() == 1 ? "" : "s") + ": ";
  for (size_t i = 0; i < missing.size() && i < kMaxNamed; ++i) {
    if (i) msg += ", ";
    msg += missing[i];
  }
  if (missing.size() > kMaxNamed)
    msg += " (and " + std::to_string(missing.size() - kMaxNamed) + " more)";
  return Status::Timeout(std::move(msg));
}

}  // namespace kolo::store_internal
