// One rank of a fault-injection job (tests/faults/faults_test.cc): allreduces a small int64
// tensor step after step and checks every result exactly, so that a fault can end a rank's
// run only with an error, never with a wrong number.
//
// Usage: fault_worker STEPS   (0: until an error)
// With FAULT_SURVIVE_SIGTERM set, the rank ignores SIGTERM, so that a test sees it detect a
// dead peer by itself rather than be stopped by kolorun first (kolorun's SIGKILL after the
// grace period still ends it).
// With FAULT_HELPER set, rank 1 runs it with system() after init: a helper process it starts
// (which inherits whatever the rank did not mark close-on-exec).
// Prints, each line flushed: "rank R pid P ready" after init; "rank R step S" every 50 steps;
// "rank R done" at the end; on an error "rank R failed N ms after its last success: <status>"
// (exit 3); on a wrong result "rank R WRONG RESULT at step S: got G, expected E" (exit 4).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 0;
  if (std::getenv("FAULT_SURVIVE_SIGTERM")) ::signal(SIGTERM, SIG_IGN);
  if (kolo::Status st = kolo::init(); !st.ok()) {
    say("init failed: " + st.to_string());
    return 1;
  }
  const int rank = kolo::rank(), size = kolo::size();
  const std::string me = "rank " + std::to_string(rank);
  if (const char* helper = std::getenv("FAULT_HELPER"); helper && rank == 1)
    (void)std::system(helper);
  say(me + " pid " + std::to_string(::getpid()) + " ready");
  std::vector<int64_t> values(64);
  auto last_success = std::chrono::steady_clock::now();
  for (long step = 1; steps == 0 || step <= steps; ++step) {
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = (rank + 1) * step + static_cast<int64_t>(i);
    kolo::Status st = kolo::allreduce("step", kolo::view_of(values.data(), {64}));
    if (!st.ok()) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - last_success);
      say(me + " failed " + std::to_string(ms.count()) +
          " ms after its last success: " + st.to_string());
      return 3;
    }
    for (size_t i = 0; i < values.size(); ++i) {
      const int64_t expected = step * size * (size + 1) / 2 + size * static_cast<int64_t>(i);
      if (values[i] != expected) {
        say(me + " WRONG RESULT at step " + std::to_string(step) + ": got " +
            std::to_string(values[i]) + ", expected " + std::to_string(expected));
        return 4;
      }
    }
    last_success = std::chrono::steady_clock::now();
    if (step % 50 == 0) say(me + " step " + std::to_string(step));
  }
  say(me + " done");
  (void)kolo::shutdown();
  return 0;
}
