#include "ops/detail.h"

#include "ops/reduce.h"
#include "ops/validate.h"

namespace kolo::ops {

Status Pending::wait_all(std::string_view op, std::string_view verb, int peer) {
  Status first;
  for (const Request& r : requests_) {
    Status s = channel_.wait(r);
    if (first.ok() && !s.ok()) first = with_peer(std::move(s), op, verb, peer);
  }
  requests_.clear();
  return first;
}

void Pending::drain() {
  for (const Request& r : requests_)
    if (!r.done()) (void)channel_.wait(r);
  requests_.clear();
}

Status wait_for(Channel& channel, const Request& request, std::string_view op,
                std::string_view verb, int peer) {
  return with_peer(channel.wait(request), op, verb, peer);
}

std::vector<int64_t> split_evenly(int64_t count, int parts) {
  std::vector<int64_t> out(static_cast<size_t>(parts), count / parts);
  for (int64_t i = 0; i < count % parts; ++i) ++out[static_cast<size_t>(i)];
  return out;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

void apply_prescale(const ReduceSpec& spec, void* data, int64_t count) {
  scale(spec.dtype, data, count, spec.prescale);
}

void finish_reduction(const ReduceSpec& spec, void* data, int64_t count, int group_size) {
  if (spec.op == ReduceOp::kAverage) divide(spec.dtype, data, count, group_size);
  scale(spec.dtype, data, count, spec.postscale);
}

}  // namespace kolo::ops
