// A Kolo program for kolorun's end-to-end tests of failures (kolorun_test.cc). Usage:
//   kolorun_kolo_child leave RANK STATUS
// Every rank calls kolo::init(). Rank RANK then returns STATUS from main at once, without
// kolo::shutdown() (so Kolo's static destructors end its session), while every other rank
// allreduces a tensor, which can never complete. A rank whose allreduce fails throws the
// Status's message, uncaught, as a program on the training stack (kolo::fw throws kolo::Error)
// would: the C++ runtime ends it with SIGABRT after printing "what(): <message>". The other
// ranks ignore SIGTERM, so that kolorun's stopping them does not hide what they print (its
// SIGKILL after the grace period still ends them).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kolo/kolo.h"

int main(int argc, char** argv) {
  if (argc != 4 || std::string(argv[1]) != "leave") {
    std::fprintf(stderr, "usage: kolorun_kolo_child leave RANK STATUS\n");
    return 64;
  }
  const int leaver = std::atoi(argv[2]);
  if (kolo::Status st = kolo::init(); !st.ok()) {
    std::fprintf(stderr, "init: %s\n", st.to_string().c_str());
    return 65;
  }
  if (kolo::rank() == leaver) return std::atoi(argv[3]);
  ::signal(SIGTERM, SIG_IGN);
  std::vector<float> x(16, 1.0f);
  kolo::Status st = kolo::allreduce("x", kolo::view_of(x.data(), {16}));
  if (!st.ok()) throw std::runtime_error(st.to_string());
  std::printf("allreduce completed without rank %d\n", leaver);
  return 0;
}
