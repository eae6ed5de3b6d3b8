// Parsing and printing of sizes and durations with units, as used by every KOLO_* variable and
// command-line flag: "64MiB", "1.5GB", "4096" (bytes); "1ms", "2.5s", "500us", "60" (seconds).
// Public so that programs built on Kolo read sizes and times the way Kolo does (the training
// example's --bucket-size). Errors name the text and the accepted forms. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kolo/status.h"

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo {

// Bytes. Units: B, K/KB (1000), KiB (1024), M/MB, MiB, G/GB, GiB, T/TB, TiB; case-insensitive;
// no unit means bytes. Negative, non-numeric, overflowing or fractional-byte values are errors.
Result<uint64_t> parse_size(std::string_view text);

// Duration. Units: ns, us, ms, s, m/min, h; no unit means seconds. Negative is an error.
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

// "4 KiB", "1.5 MiB", "512 B": binary units, at most one decimal.
std::string format_size(uint64_t bytes);
// "850 us", "12.3 ms", "2.0 s".
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace kolo
#pragma GCC visibility pop
