// What the coordinator benchmarks (fusion, latency, autotune) share: ResNet-50's gradient
// shapes and small helpers for rows that re-initialise Kolo with other knobs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace kolo::bench {

// ResNet-50's parameter tensors in forward order: conv weights [out, in, kh, kw], each
// followed by its batch norm's weight and bias [c], and the final fc weight and bias.
std::vector<std::vector<int64_t>> resnet50_shapes();
int64_t elements(const std::vector<int64_t>& shape);
// Median of per-iteration times (in whatever unit they were taken); 0 for none.
double median(std::vector<double> v);
// Sets the environment variable, or unsets it for an empty value.
void set_env(const char* name, const std::string& value);

// Shuts Kolo down when a row ends early on an error; the success path calls shutdown() itself
// to see its status (shutdown is idempotent).
struct ShutdownOnExit {
  ~ShutdownOnExit() { (void)kolo::shutdown(); }
};

}  // namespace kolo::bench
