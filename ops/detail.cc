#include "ops/detail.h"

#include <numeric>
#include <string>

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

int64_t sum_of(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

Status with_peer(Status status, std::string_view op, std::string_view verb, int peer) {
  if (status.ok()) return status;
  return status.with_context(std::string(op) + ": " + std::string(verb) + " rank " +
                             std::to_string(peer));
}

}  // namespace kolo::ops
