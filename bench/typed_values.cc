#include "bench/typed_values.h"

#include <cmath>
#include <cstring>

#include "kolo/float16.h"

namespace kolo::bench {

namespace {
template <typename T>
void put(void* base, int64_t index, T value) {
  std::memcpy(static_cast<char*>(base) + index * sizeof(T), &value, sizeof(T));
}
template <typename T>
T get(const void* base, int64_t index) {
  T value;
  std::memcpy(&value, static_cast<const char*>(base) + index * sizeof(T), sizeof(T));
  return value;
}
}  // namespace

void store_value(DataType dtype, void* base, int64_t index, double v) {
  switch (dtype) {
    case DataType::kUInt8:
      return put(base, index, static_cast<uint8_t>(v));
    case DataType::kInt8:
      return put(base, index, static_cast<int8_t>(v));
    case DataType::kInt16:
      return put(base, index, static_cast<int16_t>(v));
    case DataType::kInt32:
      return put(base, index, static_cast<int32_t>(v));
    case DataType::kInt64:
      return put(base, index, static_cast<int64_t>(v));
    case DataType::kFloat16:
      return put(base, index, float_to_half(static_cast<float>(v)));
    case DataType::kBFloat16:
      return put(base, index, float_to_bfloat16(static_cast<float>(v)));
    case DataType::kFloat32:
      return put(base, index, static_cast<float>(v));
    case DataType::kFloat64:
      return put(base, index, v);
  }
}

double load_value(DataType dtype, const void* base, int64_t index) {
  switch (dtype) {
    case DataType::kUInt8:
      return get<uint8_t>(base, index);
    case DataType::kInt8:
      return get<int8_t>(base, index);
    case DataType::kInt16:
      return get<int16_t>(base, index);
    case DataType::kInt32:
      return get<int32_t>(base, index);
    case DataType::kInt64:
      return static_cast<double>(get<int64_t>(base, index));
    case DataType::kFloat16:
      return half_to_float(get<uint16_t>(base, index));
    case DataType::kBFloat16:
      return bfloat16_to_float(get<uint16_t>(base, index));
    case DataType::kFloat32:
      return get<float>(base, index);
    case DataType::kFloat64:
      return get<double>(base, index);
  }
  return 0;
}

double tolerance(DataType dtype, ReduceOp op, double expected) {
  const double magnitude = std::max(1.0, std::fabs(expected));
  switch (dtype) {
    case DataType::kFloat16:
      return 4 * 0x1p-10 * magnitude;
    case DataType::kBFloat16:
      return 4 * 0x1p-7 * magnitude;
    case DataType::kFloat32:
      return 4 * 0x1p-23 * magnitude;
    case DataType::kFloat64:
      return 4 * 0x1p-52 * magnitude;
    default:
      // Integer averages truncate, which may land one below the exact quotient.
      return op == ReduceOp::kAverage ? 1.0 : 0.0;
  }
}

}  // namespace kolo::bench
