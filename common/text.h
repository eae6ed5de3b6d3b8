// Small text helpers shared across components.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace kolo {

// ASCII upper case, e.g. the timeline's span names ("tcp" + "allreduce" -> "TCP_ALLREDUCE").
inline std::string to_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace kolo
