// A rank program for kolorun's end-to-end tests. Usage: kolorun_test_child MODE [ARG]
// With READY_DIR set, the sleeping modes create READY_DIR/<KOLO_RANK> once they are set up, so
// a test script can wait for them instead of guessing a delay.
//   env          print the KOLO_* world variables (and OPENBLAS_NUM_THREADS) as "name=value"
//   exit N       exit with status N
//   sleep        print "sleeping pid=P", then sleep until a signal (SIGTERM kills it)
//   sleep-report print "ready", then on SIGTERM print "got SIGTERM" and exit 0
//   ignore-term  print "ready", ignore SIGTERM and sleep (only SIGKILL stops it)
//   world        world_from_knobs(), then a rendezvous barrier over its store; print "world ok"
//   flood        write its pid to READY_DIR/<KOLO_RANK>, then print 100-byte lines forever
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "rendezvous/world.h"

namespace {
volatile sig_atomic_t g_term = 0;
void on_term(int) { g_term = 1; }

void mark_ready() {
  const char* dir = std::getenv("READY_DIR");
  const char* rank = std::getenv("KOLO_RANK");
  if (!dir || !rank) return;
  std::string path = std::string(dir) + "/" + rank;
  if (FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env") {
    for (const char* v :
         {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
          "KOLO_CROSS_SIZE", "KOLO_STORE_ADDR", "KOLO_SECRET", "KOLO_FUSION_THRESHOLD",
          "KOLO_RENDEZVOUS_TIMEOUT", "EXTRA", "OPENBLAS_NUM_THREADS"}) {
      const char* val = std::getenv(v);
      std::printf("%s=%s\n", v, val ? val : "<unset>");
    }
    return 0;
  }
  if (mode == "exit" && argc > 2) return std::atoi(argv[2]);
  if (mode == "sleep") {
    std::printf("sleeping pid=%d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
    mark_ready();
    while (true) ::pause();
  }
  if (mode == "sleep-report") {
    struct sigaction sa = {};
    sa.sa_handler = on_term;
    ::sigaction(SIGTERM, &sa, nullptr);
    // SIGTERM stays blocked except inside sigsuspend: with pause(), a signal arriving between
    // the check of g_term and the call would be waited for forever.
    sigset_t term, unblocked;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &term, &unblocked);
    std::printf("ready\n");
    std::fflush(stdout);
    while (!g_term) ::sigsuspend(&unblocked);
    std::printf("got SIGTERM\n");
    return 0;
  }
  if (mode == "ignore-term") {
    ::signal(SIGTERM, SIG_IGN);
    std::printf("ready\n");
    std::fflush(stdout);
    mark_ready();
    while (true) ::pause();
  }
  if (mode == "flood") {
    // Told through a file: kolorun's forwarding of this rank's output is what is under test.
    const char* dir = std::getenv("READY_DIR");
    const char* rank = std::getenv("KOLO_RANK");
    if (dir && rank) {
      std::string path = std::string(dir) + "/" + rank, tmp = path + ".tmp";
      if (FILE* f = std::fopen(tmp.c_str(), "w")) {
        std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
        std::fclose(f);
        std::rename(tmp.c_str(), path.c_str());
      }
    }
    const std::string line(99, 'x');
    while (true) std::printf("%s\n", line.c_str());
  }
  if (mode == "world") {
    auto knobs = kolo::KnobSet::from_process_env();
    auto w =
        knobs.ok() ? kolo::world_from_knobs(*knobs) : kolo::Result<kolo::World>(knobs.status());
    if (!w.ok()) {
      std::fprintf(stderr, "%s\n", w.status().to_string().c_str());
      return 1;
    }
    kolo::Status s =
        kolo::rendezvous_barrier(*w->store, "test", w->rank, w->size, std::chrono::seconds(20));
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.to_string().c_str());
      return 1;
    }
    std::printf("world ok rank=%d size=%d\n", w->rank, w->size);
    return 0;
  }
  std::fprintf(stderr, "kolorun_test_child: unknown mode '%s'\n", mode.c_str());
  return 64;
}
