#include "examples/train_fashion_mnist/progress_bar.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace kolo::example {
namespace {

// Runs `body` with a bar writing into a temporary file and returns what it wrote.
template <typename Body>
std::string capture(bool interactive, int64_t total, Body body) {
  std::FILE* f = std::tmpfile();
  {
    ProgressBar bar(f, "epoch 1/2", total, interactive);
    body(bar);
  }
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

int count(const std::string& s, char c) {
  int n = 0;
  for (char x : s) n += x == c;
  return n;
}

TEST(ProgressBar, Format) {
  ProgressBar bar(stdout, "epoch 1/2", 200, false);
  EXPECT_EQ(bar.format(100, 0.5, 0.75, 1234.4),
            "epoch 1/2 [==========>         ]  50%  100/200  loss 0.5000  acc 0.750  "
            "1234 samples/s");
  EXPECT_EQ(bar.format(200, 0.1, 1.0, 10),
            "epoch 1/2 [====================] 100%  200/200  loss 0.1000  acc 1.000  "
            "10 samples/s");
  // Out-of-range progress is clamped, not drawn past the bar.
  EXPECT_EQ(bar.format(999, 0, 0, 0).substr(0, 37), "epoch 1/2 [====================] 100%");
}

TEST(ProgressBar, PipeGetsOneLinePerTenth) {
  // 100 updates of one sample each: exactly ten lines, at 10%, 20%, ... 100%.
  std::string out = capture(false, 100, [](ProgressBar& bar) {
    for (int i = 1; i <= 100; ++i) bar.update(i, 1.0, 0.5, 100);
    bar.finish();
  });
  EXPECT_EQ(count(out, '\n'), 10);
  EXPECT_EQ(count(out, '\r'), 0);
  EXPECT_NE(out.find(" 10%  10/100"), std::string::npos);
  EXPECT_NE(out.find("100%  100/100"), std::string::npos);
}

TEST(ProgressBar, PipeSkipsTenthsJumpedOver) {
  // Big steps: one line per update that crosses into a new tenth, never a repeat.
  std::string out = capture(false, 10, [](ProgressBar& bar) {
    bar.update(5, 1, 1, 1);
    bar.update(5, 1, 1, 1);
    bar.update(10, 1, 1, 1);
  });
  EXPECT_EQ(count(out, '\n'), 2);
}

TEST(ProgressBar, TerminalRedrawsInPlace) {
  std::string out = capture(true, 10, [](ProgressBar& bar) {
    for (int i = 1; i <= 10; ++i) bar.update(i, 1, 1, 1);
    bar.finish();
    bar.finish();  // idempotent
  });
  EXPECT_EQ(count(out, '\r'), 10);
  EXPECT_EQ(count(out, '\n'), 1);
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace
}  // namespace kolo::example
