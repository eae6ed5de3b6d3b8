#include "backends/mpi/mpi_types.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>

#include "backends/mpi/mpi_runtime.h"
#include "kolo/float16.h"

namespace kolo {

namespace {

// A 16-bit float format: how to widen to float and round back.
struct Half {
  static float load(uint16_t v) { return half_to_float(v); }
  static uint16_t store(float v) { return float_to_half(v); }
};
struct BFloat {
  static float load(uint16_t v) { return bfloat16_to_float(v); }
  static uint16_t store(float v) { return float_to_bfloat16(v); }
};

struct Sum {
  static float apply(float a, float b) { return a + b; }
};
struct Prod {
  static float apply(float a, float b) { return a * b; }
};
struct Min {
  static float apply(float a, float b) { return std::fmin(a, b); }
};
struct Max {
  static float apply(float a, float b) { return std::fmax(a, b); }
};

// MPI user function: inout[i] = in[i] (op) inout[i]. `len` counts 2-byte elements of our
// contiguous type, so the buffers are exactly len uint16 values.
template <typename Format, typename Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = Format::store(Op::apply(Format::load(a[i]), Format::load(b[i])));
}

// Index order: ReduceOp sum(=average), min, max, product.
struct HalfTable {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

struct Tables {
  Status status;
  HalfTable half;
  HalfTable bfloat;
};

template <typename Format>
Status make_table(HalfTable& table) {
  int rc = MPI_Type_contiguous(2, MPI_BYTE, &table.type);
  if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&table.type);
  if (rc != MPI_SUCCESS) return mpi_status(rc, "mpi: creating a 16-bit float datatype");
  MPI_User_function* fns[4] = {&half_reduce<Format, Sum>, &half_reduce<Format, Min>,
                               &half_reduce<Format, Max>, &half_reduce<Format, Prod>};
  for (int i = 0; i < 4; ++i) {
    rc = MPI_Op_create(fns[i], /*commute=*/1, &table.ops[i]);
    if (rc != MPI_SUCCESS) return mpi_status(rc, "mpi: creating a 16-bit float reduction");
  }
  return Status::Ok();
}

const Tables& tables() {
  static Tables t;
  static std::once_flag once;
  std::call_once(once, [] {
    t.status = make_table<Half>(t.half);
    if (t.status.ok()) t.status = make_table<BFloat>(t.bfloat);
  });
  return t;
}

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return 0;
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kProduct:
      return 3;
  }
  return -1;
}

}  // namespace

Result<MPI_Datatype> mpi_datatype(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const Tables& t = tables();
      if (!t.status.ok()) return t.status;
      return dtype == DataType::kFloat16 ? t.half.type : t.bfloat.type;
    }
  }
  // Unreachable: Backend validates the dtype before any mpi collective runs.
  return Status::Internal("mpi: dtype enum value " + std::to_string(static_cast<int>(dtype)) +
                          " reached mpi_datatype unvalidated");
}

Result<MPI_Op> mpi_op(DataType dtype, ReduceOp op) {
  const int index = op_index(op);
  if (index < 0)
    return Status::Internal("mpi: reduce op enum value " + std::to_string(static_cast<int>(op)) +
                            " reached mpi_op unvalidated");  // Backend validates it first
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    const Tables& t = tables();
    if (!t.status.ok()) return t.status;
    return (dtype == DataType::kFloat16 ? t.half : t.bfloat).ops[index];
  }
  static const MPI_Op kNative[4] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  return kNative[index];
}

}  // namespace kolo
