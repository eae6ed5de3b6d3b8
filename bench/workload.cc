#include "bench/workload.h"

#include <algorithm>
#include <cstdlib>

namespace kolo::bench {

std::vector<std::vector<int64_t>> resnet50_shapes() {
  std::vector<std::vector<int64_t>> shapes;
  auto conv_bn = [&](int64_t out, int64_t in, int64_t k) {
    shapes.push_back({out, in, k, k});
    shapes.push_back({out});
    shapes.push_back({out});
  };
  conv_bn(64, 3, 7);
  const int64_t blocks[4] = {3, 4, 6, 3};
  const int64_t widths[4] = {64, 128, 256, 512};
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t w = widths[stage], out = 4 * w;
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      conv_bn(w, in, 1);                // 1x1 reduce
      conv_bn(w, w, 3);                 // 3x3
      conv_bn(out, w, 1);               // 1x1 expand
      if (b == 0) conv_bn(out, in, 1);  // projection shortcut
      in = out;
    }
  }
  shapes.push_back({1000, 2048});
  shapes.push_back({1000});
  return shapes;
}

int64_t elements(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void set_env(const char* name, const std::string& value) {
  if (value.empty())
    unsetenv(name);
  else
    setenv(name, value.c_str(), 1);
}

}  // namespace kolo::bench
