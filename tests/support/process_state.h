// What a test may ask about a process it started (or that one of its processes started).
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

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

// When `pid` started, in clock ticks since boot (/proc/<pid>/stat field 22); 0 when it is gone.
inline uint64_t start_ticks(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 2));  // field 3 (state) onwards
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::stoull(field);
  }
  return 0;
}

// The processes started at or after `since_ticks` (see start_ticks) that map a file whose
// /proc/<pid>/maps path contains `needle`, e.g. "memfd:kolo-shm": what a job left behind, told
// apart from other jobs on the machine by when its processes started.
inline std::vector<pid_t> processes_mapping(std::string_view needle, uint64_t since_ticks) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || start_ticks(static_cast<pid_t>(pid)) < since_ticks) continue;
    std::ifstream maps("/proc/" + std::string(entry->d_name) + "/maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.find(needle) != std::string::npos) {
        found.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
  }
  ::closedir(proc);
  return found;
}

}  // namespace kolo::testing
