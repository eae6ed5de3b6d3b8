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
#include "ops/validate.h"

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
  KOLO_RETURN_IF_ERROR(check_dtype(kOp, dtype));
  KOLO_RETURN_IF_ERROR(check_counts(kOp, "send_counts", send_counts, p));
  KOLO_RETURN_IF_ERROR(check_counts(kOp, "recv_counts", recv_counts, p));
  KOLO_RETURN_IF_ERROR(check_buffer(kOp, "input", input, sum_of(send_counts)));
  KOLO_RETURN_IF_ERROR(check_buffer(kOp, "output", output, sum_of(recv_counts)));
  if (send_counts[r] != recv_counts[r])
    return Status::InvalidArgument(
        "alltoallv: send_counts[" + std::to_string(r) + "] (what rank " + std::to_string(r) +
        " keeps for itself) must equal recv_counts[" + std::to_string(r) +
        "] = " + std::to_string(recv_counts[r]) + ", got " + std::to_string(send_counts[r]));

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
