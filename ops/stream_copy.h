// stream_copy: memcpy with non-temporal (streaming) stores, for copies into memory that is not
// read again before it leaves the cache.
//
// Why: an ordinary store to a line not in the cache first reads the line from memory (a
// read-for-ownership), so copying B bytes into memory costs 3B of memory traffic; streaming
// stores write whole lines without reading them, 2B. glibc's memcpy streams only copies larger
// than about 3/4 of the last-level cache, and the shm backend copies a large allreduce's result
// out in chunks far below that, so it asks for streaming itself (Note [Chunked allreduce] in
// backends/shm/shm_backend.cc); kolo-bench's --copy row uses it for the memory's floor. The
// result is the same bytes as memcpy's.
//
// Streaming stores are weakly ordered: stream_copy ends with a store fence, so that a release
// store after it (a handle's completion, a published counter) orders the copied bytes too.
// Thread-safety: none needed (plain memory). dst and src must not overlap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kolo::ops {

inline void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // The head up to dst's first 16-byte boundary, by memcpy.
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, bytes);  // the tail
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace kolo::ops
