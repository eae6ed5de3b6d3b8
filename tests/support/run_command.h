// Helpers for the multi-process tests: run a shell command (kolorun, mpirun, a worker) and
// capture what it printed. Header-only; used by the tests under tests/ only.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace kolo::testing {

struct ProcessRun {
  int exit_code = -1;  // 124 when the time limit killed it
  std::string output;  // stdout and stderr together
};

// Runs `command` with bash under `timeout`, so that a hang fails the test with exit code 124
// instead of blocking CTest. Single quotes in `command` must be escaped by the caller.
inline ProcessRun run_command(const std::string& command, int timeout_s = 60) {
  const std::string wrapped =
      "timeout -k 5 " + std::to_string(timeout_s) + " bash -c '" + command + "' 2>&1";
  ProcessRun r;
  FILE* pipe = popen(wrapped.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A program the build put at `built_path` (a CMake $<TARGET_FILE>): that path when it exists,
// else the file of the same name beside this test's own executable. The GPU check's bundle
// (scripts/gpu-check.sh --bundle) carries the binaries to another machine, where only the
// second holds.
inline std::string program_path(const std::string& built_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(built_path, ec)) return built_path;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return built_path;
  return (self.parent_path() / fs::path(built_path).filename()).string();
}

// How many times `what` occurs in `text`.
inline int count_occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace kolo::testing
