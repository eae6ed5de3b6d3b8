// All-to-all with splits by pairwise exchange: at step s (1 <= s < P) rank r sends to r+s and
// receives from r-s, so every pair meets exactly once and no rank receives from two peers at
// once. Each message is preceded by an 8-byte header holding its element count: the receiver
// compares it with the recv_counts entry it was given, so a disagreement between two ranks is
// reported as Mismatch naming both, instead of silently corrupting the output or desynchronising
// the stream. On a mismatch the receiver still consumes the bytes the peer sent and finishes
// the remaining steps, so every rank leaves the collective in step and the channel stays usable.
#include <algorithm>
#include <cstring>
#include <string>

#include "ops/collectives.h"
#include "ops/detail.h"

namespace kolo::ops {

namespace {
constexpr const char* kOp = "alltoallv";

// Receives and discards `bytes` bytes from `peer`.
Status discard(Channel& channel, int peer, size_t bytes) {
  std::vector<char> sink(std::min<size_t>(bytes, 64 * 1024));
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(sink.size(), bytes - done);
    KOLO_RETURN_IF_ERROR(with_peer(channel.recv(peer, sink.data(), n), kOp, "receive from", peer));
    done += n;
  }
  return Status::Ok();
}
}  // namespace

Status alltoallv(Channel& channel, const void* input, const std::vector<int64_t>& send_counts,
                 void* output, const std::vector<int64_t>& recv_counts, DataType dtype) {
  const int p = channel.size();
  const int r = channel.rank();
  KOLO_ENFORCE(
      static_cast<int>(send_counts.size()) == p && static_cast<int>(recv_counts.size()) == p,
      "send_counts.size() " << send_counts.size() << ", recv_counts.size() " << recv_counts.size());
  KOLO_ENFORCE(send_counts[r] == recv_counts[r], "send_counts[" << r << "] " << send_counts[r]
                                                                << ", recv_counts[" << r << "] "
                                                                << recv_counts[r]);
  KOLO_ENFORCE((input != nullptr || sum_of(send_counts) == 0) &&
               (output != nullptr || sum_of(recv_counts) == 0));

  const size_t es = dtype_size(dtype);
  const std::vector<int64_t> send_off = offsets_of(send_counts);
  const std::vector<int64_t> recv_off = offsets_of(recv_counts);
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  if (recv_counts[r] > 0)
    std::memcpy(out + recv_off[r] * es, in + send_off[r] * es,
                static_cast<size_t>(recv_counts[r]) * es);

  Status first_error;
  for (int s = 1; s < p; ++s) {
    const int to = (r + s) % p;
    const int from = (r - s + p) % p;
    const int64_t header = send_counts[to];
    Pending sends(channel);
    sends.add(channel.isend(to, &header, sizeof header));
    if (header > 0)
      sends.add(channel.isend(to, in + send_off[to] * es, static_cast<size_t>(header) * es));

    int64_t told = 0;
    KOLO_RETURN_IF_ERROR(
        with_peer(channel.recv(from, &told, sizeof told), kOp, "receive from", from));
    if (told == recv_counts[from]) {
      if (told > 0)
        KOLO_RETURN_IF_ERROR(
            with_peer(channel.recv(from, out + recv_off[from] * es, static_cast<size_t>(told) * es),
                      kOp, "receive from", from));
    } else {
      if (first_error.ok())
        first_error = Status::Mismatch(
            "alltoallv: rank " + std::to_string(from) + " sends " + std::to_string(told) +
            " elements to rank " + std::to_string(r) + ", but rank " + std::to_string(r) +
            " expects recv_counts[" + std::to_string(from) +
            "] = " + std::to_string(recv_counts[from]) +
            "; every rank's send_counts[j] must equal rank j's recv_counts entry for it");
      if (told < 0)  // a corrupt header: the stream cannot be resynchronised
        return first_error;
      KOLO_RETURN_IF_ERROR(discard(channel, from, static_cast<size_t>(told) * es));
    }
    KOLO_RETURN_IF_ERROR(sends.wait_all(kOp, "send to", to));
  }
  return first_error;
}

}  // namespace kolo::ops
