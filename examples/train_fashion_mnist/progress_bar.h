// A per-epoch progress display for a training loop.
//
// On a terminal it redraws one line in place with '\r':
//   epoch 2/3 [==========>         ] 52%  31200/60000  loss 0.4123  acc 0.853  4120 samples/s
// Elsewhere (a pipe, a file, kolorun's prefixed output) carriage returns would pile up into one
// unreadable line, so it prints a full line each time another tenth of the epoch is done.
//
// The caller passes running values; the bar only formats them. Thread-safety: none (one
// training thread). Writes only to the FILE* given (not owned).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace kolo::example {

class ProgressBar {
 public:
  // `total` is the number of samples the epoch will show (> 0). `interactive`: redraw in
  // place (use is_terminal(out) to choose).
  ProgressBar(std::FILE* out, std::string label, int64_t total, bool interactive);

  // `done` samples so far (monotonic, clamped to total); loss and accuracy are running means.
  void update(int64_t done, double loss, double accuracy, double samples_per_second);
  // Ends the line on a terminal (so the summary starts on a fresh line). Idempotent.
  void finish();

  static bool is_terminal(std::FILE* out);
  // The text of one update, without '\r' or newline (exposed for tests and logs).
  std::string format(int64_t done, double loss, double accuracy, double samples_per_second) const;

 private:
  std::FILE* out_;
  std::string label_;
  int64_t total_;
  bool interactive_;
  int last_tenth_ = 0;  // non-interactive: tenths of the epoch already printed
  bool drawn_ = false;  // interactive: a line is open
};

}  // namespace kolo::example
