// Helpers shared by the Store implementations: argument checks and the wording of errors, so
// that every store rejects the same inputs with the same messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kolo/status.h"

namespace kolo::store_internal {

// InvalidArgument when key is empty, holds a NUL, or is longer than kMaxStoreKeyBytes.
Status validate_key(std::string_view op, std::string_view key);
// InvalidArgument when value is longer than kMaxStoreValueBytes.
Status validate_value(std::string_view op, std::string_view key, std::string_view value);
// InvalidArgument when timeout is negative.
Status validate_timeout(std::string_view op, std::chrono::milliseconds timeout);

// Parses a counter's stored text; an empty optional-like error when it is not a decimal int64.
Result<int64_t> parse_counter(std::string_view key, std::string_view text);
// Returns current + delta, or InvalidArgument on int64 overflow.
Result<int64_t> checked_add(std::string_view key, int64_t current, int64_t delta);

// "store wait timed out after 1500ms: missing keys: a, b" (at most 10 keys named).
Status missing_keys_timeout(std::string_view op, std::chrono::milliseconds timeout,
                            const std::vector<std::string>& missing);

// "30s" when whole seconds, else "1500ms".
std::string format_ms(std::chrono::milliseconds d);

}  // namespace kolo::store_internal
