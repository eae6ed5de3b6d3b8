#include "coordinator/identity.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace kolo::coord {

namespace {

template <typename T>
void fill(void* data, int64_t count, T value) {
  std::fill_n(static_cast<T*>(data), count, value);
}

template <typename T>
T identity(ReduceOp op) {
  using L = std::numeric_limits<T>;
  switch (op) {
    case ReduceOp::kMin:
      return L::has_infinity ? L::infinity() : L::max();
    case ReduceOp::kMax:
      return L::has_infinity ? -L::infinity() : L::lowest();
    case ReduceOp::kProduct:
      return T(1);
    default:
      return T(0);
  }
}

// Bit patterns of the half-precision formats: +inf, -inf and 1.0.
uint16_t half_identity(ReduceOp op, bool bf16) {
  switch (op) {
    case ReduceOp::kMin:
      return bf16 ? 0x7F80 : 0x7C00;
    case ReduceOp::kMax:
      return bf16 ? 0xFF80 : 0xFC00;
    case ReduceOp::kProduct:
      return bf16 ? 0x3F80 : 0x3C00;
    default:
      return 0;
  }
}

}  // namespace

void fill_identity(DataType dtype, ReduceOp op, void* data, int64_t count) {
  if (count <= 0) return;
  switch (dtype) {
    case DataType::kUInt8:
      return fill<uint8_t>(data, count, identity<uint8_t>(op));
    case DataType::kInt8:
      return fill<int8_t>(data, count, identity<int8_t>(op));
    case DataType::kInt16:
      return fill<int16_t>(data, count, identity<int16_t>(op));
    case DataType::kInt32:
      return fill<int32_t>(data, count, identity<int32_t>(op));
    case DataType::kInt64:
      return fill<int64_t>(data, count, identity<int64_t>(op));
    case DataType::kFloat16:
      return fill<uint16_t>(data, count, half_identity(op, false));
    case DataType::kBFloat16:
      return fill<uint16_t>(data, count, half_identity(op, true));
    case DataType::kFloat32:
      return fill<float>(data, count, identity<float>(op));
    case DataType::kFloat64:
      return fill<double>(data, count, identity<double>(op));
  }
}

}  // namespace kolo::coord
