#include "kolo/types.h"

#include <array>
#include <utility>

namespace kolo {
namespace {

struct DtypeInfo {
  DataType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DtypeInfo, kNumDataTypes> kDtypes = {{
    {DataType::kUInt8, "uint8", 1},
    {DataType::kInt8, "int8", 1},
    {DataType::kInt32, "int32", 4},
    {DataType::kInt64, "int64", 8},
    {DataType::kFloat16, "float16", 2},
    {DataType::kBFloat16, "bfloat16", 2},
    {DataType::kFloat32, "float32", 4},
    {DataType::kFloat64, "float64", 8},
    {DataType::kInt16, "int16", 2},
}};

constexpr std::array<std::pair<std::string_view, DataType>, 11> kDtypeAliases = {{
    {"u8", DataType::kUInt8},
    {"i8", DataType::kInt8},
    {"i16", DataType::kInt16},
    {"i32", DataType::kInt32},
    {"i64", DataType::kInt64},
    {"f16", DataType::kFloat16},
    {"half", DataType::kFloat16},
    {"bf16", DataType::kBFloat16},
    {"f32", DataType::kFloat32},
    {"float", DataType::kFloat32},
    {"f64", DataType::kFloat64},
}};

constexpr std::array<std::string_view, kNumReduceOps> kOpNames = {"sum", "average", "min", "max",
                                                                  "product"};

}  // namespace

size_t dtype_size(DataType dtype) { return kDtypes[static_cast<int>(dtype)].size; }
std::string_view dtype_name(DataType dtype) { return kDtypes[static_cast<int>(dtype)].name; }
bool is_valid_dtype(int value) { return value >= 0 && value < kNumDataTypes; }

std::optional<DataType> parse_dtype(std::string_view name) {
  for (const auto& info : kDtypes)
    if (info.name == name) return info.dtype;
  for (const auto& [alias, dtype] : kDtypeAliases)
    if (alias == name) return dtype;
  if (name == "double") return DataType::kFloat64;
  return std::nullopt;
}

std::string_view reduce_op_name(ReduceOp op) { return kOpNames[static_cast<int>(op)]; }
bool is_valid_reduce_op(int value) { return value >= 0 && value < kNumReduceOps; }

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (int i = 0; i < kNumReduceOps; ++i)
    if (kOpNames[i] == name) return static_cast<ReduceOp>(i);
  if (name == "avg") return ReduceOp::kAverage;
  if (name == "prod") return ReduceOp::kProduct;
  return std::nullopt;
}

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace kolo
