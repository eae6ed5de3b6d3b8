// "I/O and logging on rank 0": a logger that prints on rank 0 only (or on every rank, each
// line prefixed with its rank), and run_on_root_first, where rank 0 does something (download a
// data set, create a folder) while the other ranks wait, and every rank learns whether it
// worked. Each works on a process set too (kolo/process_set.h; the global set by default):
// then "rank 0" is the set's first rank and "every rank" its members, e.g. one logger and one
// download per data-parallel group.
//
// Thread-safety: RankLogger may be shared by threads (each call prints whole lines, not
// interleaved with another call's). run_on_root_first and share_root_outcome are collective:
// call them from one thread per rank, in the same order on every rank.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include "kolo/process_set.h"
#include "kolo/status.h"

namespace kolo::fw {

struct RankLoggerOptions {
  // false: only rank 0 prints, without a prefix. true: every rank prints, each line prefixed
  // "[rank N] " (N = kolo::rank() at the call; 0 before init).
  bool every_rank = false;
  std::FILE* out = stdout;  // borrowed; flushed after every call, so ranks' lines keep order
  // The ranks that print: the set's rank 0 (every member with every_rank; the prefix is still
  // the job rank). Ranks outside the set print nothing.
  ProcessSet process_set = {};
};

class RankLogger {
 public:
  explicit RankLogger(RankLoggerOptions options = {}) : options_(options) {}

  // Whether this rank prints (the set's rank 0, or every member with every_rank).
  bool enabled() const;
  // Prints `text` plus a newline (each line of a multi-line text gets the prefix).
  void line(std::string_view text) const;
  // printf-style; the result is printed as line() prints it (a trailing newline is optional).
  void printf(const char* format, ...) const __attribute__((format(printf, 2, 3)));

 private:
  RankLoggerOptions options_;
};

// Collective over `process_set`, whose rank `root` (a set rank) runs `work` while the other
// members wait for its outcome, which every member then returns: OK everywhere when work
// returned OK. Otherwise root returns work's Status and every other member one with the same
// code and the message "'<name>' failed on root rank <root>: <root's message>" (with " of
// <the set>" after the root for a set other than the global one), so a failure on root stops
// every member with the reason instead of leaving them to hang or to fail later without it.
// An exception from work is caught: a kolo::Error gives its Status, another std::exception
// IoError("'<name>': <what()>"). Operations named "<name>.ok" and "<name>.error" carry the
// outcome. Errors of those operations (a dead peer, before init, a rank outside the set) are
// returned as they are.
Status run_on_root_first(const std::string& name, const std::function<Status()>& work, int root = 0,
                         const ProcessSet& process_set = {});

// Collective over `process_set`: the sharing step of run_on_root_first, for callers that ran
// root's part themselves. Root passes its outcome; the other ranks' `root_status` is ignored.
// Every member returns OK when root's was OK; otherwise root returns its own and the others
// its code with "<what> on root rank <root>[ of <the set>]: <root's message>" (the message
// capped at 4096 bytes). One
// broadcast on success, two on failure; every rank takes the same path.
Status share_root_outcome(const std::string& name, const Status& root_status, int root,
                          const std::string& what, const ProcessSet& process_set = {});

}  // namespace kolo::fw
