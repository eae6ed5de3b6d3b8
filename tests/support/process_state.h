// What a test may ask about a process it started (or that one of its processes started).
#pragma once

#include <sys/types.h>

#include <fstream>
#include <string>

namespace kolo::testing {

// True once `pid` has exited: gone, or a zombie nobody has reaped yet (which kill(pid, 0) would
// still report as present).
inline bool has_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t close = line.rfind(')');  // the state follows the command name in parentheses
  return close != std::string::npos && close + 2 < line.size() &&
         (line[close + 2] == 'Z' || line[close + 2] == 'X');
}

}  // namespace kolo::testing
