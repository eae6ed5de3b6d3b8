// Element types, reduction operators and devices: the vocabulary shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo {

enum class DataType : uint8_t {
  kUInt8,
  kInt8,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kInt16,  // placeholder: outside kNumDataTypes until the mismatch branch's real one lands
};
inline constexpr int kNumDataTypes = 8;

// Bytes per element.
size_t dtype_size(DataType dtype);
// "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64".
std::string_view dtype_name(DataType dtype);
// Accepts the names above and the short forms "u8", "i8", "i32", "i64", "f16"/"half",
// "bf16", "f32"/"float", "f64"/"double". nullopt when unknown.
std::optional<DataType> parse_dtype(std::string_view name);
// True when the value is one of the enumerators (guards casts from integers off the wire).
bool is_valid_dtype(int value);

enum class ReduceOp : uint8_t {
  kSum,
  kAverage,  // sum, then divided by the number of contributing ranks
  kMin,
  kMax,
  kProduct,
};
inline constexpr int kNumReduceOps = 5;

// "sum", "average", "min", "max", "product".
std::string_view reduce_op_name(ReduceOp op);
// Accepts the names above and "avg", "prod". nullopt when unknown.
std::optional<ReduceOp> parse_reduce_op(std::string_view name);
bool is_valid_reduce_op(int value);

// How an allreduce or a reducescatter combines the ranks' values; the one description of a
// reduction, shared by the public API (AllreduceOptions, ReducescatterOptions), the Backend
// interface and the ops/ algorithms. Each rank's input is multiplied by prescale, the inputs
// are combined with op, and the result is multiplied by postscale. kAverage combines as a sum
// and divides by the number of contributing ranks before the postscale: a true division, so
// an average whose sum divides evenly is exact, integers included (ops::finish_reduction is
// the one implementation). Integer types apply scale factors by multiplying in double and
// truncating toward zero; a scaled value outside the type's range is unspecified (the CPU
// backends wrap it on x86, the GPU's kernels saturate it).
// Valid when op is a ReduceOp enumerator and both factors are finite. One function checks it
// (validate_reduction, backends/backend.h), where a Reduction enters Kolo: at submission
// (naming the tensor) and at the Backend interface (for direct callers); the ops/ algorithms
// below rely on it.
struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;

  bool operator==(const Reduction&) const = default;
};

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // CUDA ordinal; 0 for CPU

  static Device cpu() { return {}; }
  static Device cuda(int index) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  bool operator==(const Device&) const = default;
  // "cpu" or "cuda:N".
  std::string to_string() const;
};

}  // namespace kolo
#pragma GCC visibility pop
