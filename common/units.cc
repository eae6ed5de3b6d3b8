#include "kolo/units.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

namespace kolo {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits "12.5MiB" into 12.5 and "mib". Fails on an empty or malformed number.
bool split_number(std::string_view text, double* number, std::string* unit) {
  text = trim(text);
  size_t i = 0;
  while (i < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' || text[i] == '-' ||
          text[i] == '+' || text[i] == 'e' || text[i] == 'E')) {
    // 'e' could start a unit; only treat it as an exponent when followed by a digit or sign.
    if ((text[i] == 'e' || text[i] == 'E') &&
        !(i + 1 < text.size() && (std::isdigit(static_cast<unsigned char>(text[i + 1])) ||
                                  text[i + 1] == '-' || text[i + 1] == '+')))
      break;
    ++i;
  }
  std::string num(text.substr(0, i));
  if (num.empty()) return false;
  char* end = nullptr;
  *number = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !std::isfinite(*number)) return false;
  *unit = lower(trim(text.substr(i)));
  return true;
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  static const std::array<std::pair<std::string_view, double>, 14> kUnits = {{
      {"", 1},
      {"b", 1},
      {"k", 1e3},
      {"kb", 1e3},
      {"kib", 1024.0},
      {"m", 1e6},
      {"mb", 1e6},
      {"mib", 1048576.0},
      {"g", 1e9},
      {"gb", 1e9},
      {"gib", 1073741824.0},
      {"tb", 1e12},
      {"tib", 1099511627776.0},
      {"t", 1e12},
  }};
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("invalid size '" + std::string(text) + "' (" + std::string(why) +
                                   "); expected a non-negative number with an optional unit "
                                   "B, KB, KiB, MB, MiB, GB, GiB, TB, TiB, e.g. 64MiB");
  };
  double number = 0;
  std::string unit;
  if (!split_number(text, &number, &unit)) return bad("not a number");
  if (number < 0) return bad("negative");
  for (const auto& [name, scale] : kUnits) {
    if (name != unit) continue;
    double bytes = number * scale;
    if (bytes >= 1.8446744073709552e19) return bad("too large");
    if (bytes != std::floor(bytes)) return bad("not a whole number of bytes");
    return static_cast<uint64_t>(bytes);
  }
  return bad("unknown unit '" + unit + "'");
}

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  static const std::array<std::pair<std::string_view, double>, 8> kUnits = {{
      {"", 1e9},
      {"s", 1e9},
      {"ns", 1},
      {"us", 1e3},
      {"ms", 1e6},
      {"m", 60e9},
      {"min", 60e9},
      {"h", 3600e9},
  }};
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("invalid duration '" + std::string(text) + "' (" +
                                   std::string(why) +
                                   "); expected a non-negative number with an optional unit "
                                   "ns, us, ms, s, min, h (no unit means seconds), e.g. 5ms");
  };
  double number = 0;
  std::string unit;
  if (!split_number(text, &number, &unit)) return bad("not a number");
  if (number < 0) return bad("negative");
  for (const auto& [name, scale] : kUnits) {
    if (name != unit) continue;
    double ns = number * scale;
    if (ns > 9.2e18) return bad("too large");
    return std::chrono::nanoseconds(static_cast<int64_t>(std::llround(ns)));
  }
  return bad("unknown unit '" + unit + "'");
}

std::string format_size(uint64_t bytes) {
  static const std::array<std::string_view, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t i = 0;
  while (v >= 1024 && i + 1 < kNames.size()) {
    v /= 1024;
    ++i;
  }
  char buf[32];
  if (i == 0 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kNames[i].data());
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kNames[i].data());
  return buf;
}

std::string format_duration(std::chrono::nanoseconds d) {
  double ns = static_cast<double>(d.count());
  char buf[32];
  if (ns < 1e3)
    std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (ns < 1e6)
    std::snprintf(buf, sizeof buf, "%.0f us", ns / 1e3);
  else if (ns < 1e9)
    std::snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f s", ns / 1e9);
  return buf;
}

}  // namespace kolo
