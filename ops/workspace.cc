#include <cstdlib>
#include <new>

#include "ops/collectives.h"

namespace kolo::ops {

Workspace::~Workspace() { std::free(data_); }

void* Workspace::get(size_t bytes) {
  if (bytes <= capacity_ && data_ != nullptr) return data_;
  // Grow geometrically so a slowly rising message size does not reallocate every call, and
  // round to the 64-byte alignment that aligned_alloc requires of the size.
  size_t want = capacity_ * 2 > bytes ? capacity_ * 2 : bytes;
  want = (want + 63) / 64 * 64;
  if (want == 0) want = 64;
  void* fresh = std::aligned_alloc(64, want);
  if (fresh == nullptr) throw std::bad_alloc();
  std::free(data_);
  data_ = fresh;
  capacity_ = want;
  return data_;
}

}  // namespace kolo::ops
