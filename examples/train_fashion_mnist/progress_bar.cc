#include "examples/train_fashion_mnist/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

namespace kolo::example {

ProgressBar::ProgressBar(std::FILE* out, std::string label, int64_t total, bool interactive)
    : out_(out),
      label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      interactive_(interactive) {}

bool ProgressBar::is_terminal(std::FILE* out) { return ::isatty(::fileno(out)) == 1; }

std::string ProgressBar::format(int64_t done, double loss, double accuracy,
                                double samples_per_second) const {
  constexpr int kWidth = 20;
  done = std::clamp<int64_t>(done, 0, total_);
  const double fraction = static_cast<double>(done) / static_cast<double>(total_);
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(kWidth, ' ');
  std::fill(bar.begin(), bar.begin() + filled, '=');
  if (filled < kWidth) bar[filled] = '>';
  char text[256];
  std::snprintf(text, sizeof(text), "%s [%s] %3d%%  %lld/%lld  loss %.4f  acc %.3f  %.0f samples/s",
                label_.c_str(), bar.c_str(), static_cast<int>(fraction * 100),
                static_cast<long long>(done), static_cast<long long>(total_), loss, accuracy,
                samples_per_second);
  return text;
}

void ProgressBar::update(int64_t done, double loss, double accuracy, double samples_per_second) {
  if (interactive_) {
    // Trailing spaces wipe what a longer previous line left behind.
    std::fprintf(out_, "\r%s   ", format(done, loss, accuracy, samples_per_second).c_str());
    std::fflush(out_);
    drawn_ = true;
    return;
  }
  const int tenth = static_cast<int>(std::clamp<int64_t>(done, 0, total_) * 10 / total_);
  if (tenth <= last_tenth_) return;
  last_tenth_ = tenth;
  std::fprintf(out_, "%s\n", format(done, loss, accuracy, samples_per_second).c_str());
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (interactive_ && drawn_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  drawn_ = false;
}

}  // namespace kolo::example
