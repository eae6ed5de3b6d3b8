// TensorView and HostTensor: how a caller hands memory to Kolo and gets results back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kolo/types.h"

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo {

// A borrowed, dense, row-major tensor: pointer + shape + dtype + device. Kolo never owns the
// memory; the caller keeps it alive (and, for inputs, unchanged) until the operation's Handle
// completes. A scalar has an empty shape (one element).
struct TensorView {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DataType dtype = DataType::kFloat32;
  Device device = Device::cpu();
  // For CUDA tensors: a cudaEvent_t (passed as void* so this header needs no CUDA) that is
  // recorded after the producer wrote the data; Kolo orders its reads after it. May be null
  // when the data is ready or was written on the legacy default stream. The event must stay
  // valid until Kolo has queued the wait on it, at some point before the Handle completes: keep
  // it (and do not record it again) until the Handle completes.
  void* ready_event = nullptr;

  int64_t num_elements() const;
  size_t num_bytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype); }
};

// Builds a CPU view over a typed buffer, e.g. view_of(grad.data(), {256, 64}).
template <typename T>
TensorView view_of(T* data, std::vector<int64_t> shape);

// A result tensor that Kolo allocated (allgather, alltoall and reducescatter without an
// allocator). Owns its bytes; host memory.
struct HostTensor {
  std::vector<int64_t> shape;
  DataType dtype = DataType::kFloat32;
  std::vector<std::byte> bytes;

  int64_t num_elements() const;
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

// "[4, 3]"
std::string shape_string(const std::vector<int64_t>& shape);

namespace detail {
template <typename T>
constexpr DataType dtype_of();
template <>
constexpr DataType dtype_of<uint8_t>() {
  return DataType::kUInt8;
}
template <>
constexpr DataType dtype_of<int8_t>() {
  return DataType::kInt8;
}
template <>
constexpr DataType dtype_of<int16_t>() {
  return DataType::kInt16;
}
template <>
constexpr DataType dtype_of<int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType dtype_of<int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType dtype_of<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType dtype_of<double>() {
  return DataType::kFloat64;
}
}  // namespace detail

template <typename T>
TensorView view_of(T* data, std::vector<int64_t> shape) {
  TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(data));
  v.shape = std::move(shape);
  v.dtype = detail::dtype_of<std::remove_const_t<T>>();
  return v;
}

}  // namespace kolo
#pragma GCC visibility pop
