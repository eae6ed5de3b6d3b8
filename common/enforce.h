// Invariant checks. KOLO_ENFORCE is for conditions that only a bug in Kolo can break: it throws
// kolo::Error(Internal) naming file:line, the condition and the values given. For the caller's
// mistakes, return Status::InvalidArgument instead.
#pragma once

#include <sstream>

#include "kolo/status.h"

#define KOLO_ENFORCE(cond, ...)                                                    \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::ostringstream kolo_enforce_os_;                                         \
      kolo_enforce_os_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond; \
      __VA_OPT__(kolo_enforce_os_ << ": " << __VA_ARGS__;)                         \
      throw ::kolo::Error(::kolo::Status::Internal(kolo_enforce_os_.str()));       \
    }                                                                              \
  } while (0)
