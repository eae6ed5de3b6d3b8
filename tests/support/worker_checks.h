// Checks for the worker programs that the multi-process tests launch (one rank each): a failed
// CHECK or a non-OK Status prints what failed, with the rank, to stderr and is counted; the
// worker's main() exits 1 when failures > 0, so the test sees the line and the exit code.
// Header-only; used by the tests under tests/ only.
#pragma once

#include <cstdio>
#include <string>

#include "kolo/kolo.h"

namespace kolo::testing {

inline int failures = 0;

// Whether `st` is OK; otherwise prints "rank R: <what>: <status>" and counts a failure.
inline bool ok(const kolo::Status& st, const std::string& what) {
  if (st.ok()) return true;
  std::fprintf(stderr, "rank %d: %s: %s\n", kolo::rank(), what.c_str(), st.to_string().c_str());
  ++failures;
  return false;
}

}  // namespace kolo::testing

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "rank %d: check failed: %s (line %d)\n", kolo::rank(), #cond, \
                   __LINE__);                                                            \
      ++kolo::testing::failures;                                                         \
    }                                                                                    \
  } while (0)
