// Helpers for the ops/ tests: typed element access through double, and running one function
// per rank on threads over thread channels.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "kolo/float16.h"
#include "kolo/status.h"
#include "kolo/types.h"
#include "ops/thread_channel.h"

namespace kolo::ops::testing {

// Stores v into element i (integers: truncated, then wrapped to the type's width; 16-bit
// floats: rounded once from float).
inline void put(DataType t, void* buf, int64_t i, double v) {
  switch (t) {
    case DataType::kUInt8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt16:
      static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      break;
  }
}

inline double get(DataType t, const void* buf, int64_t i) {
  switch (t) {
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(buf)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(buf)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kFloat16:
      return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16:
      return bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(buf)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(buf)[i];
  }
  return 0;
}

inline bool is_integer(DataType t) {
  return t == DataType::kUInt8 || t == DataType::kInt8 || t == DataType::kInt16 ||
         t == DataType::kInt32 || t == DataType::kInt64;
}

// Runs fn(channel) for every rank of a fresh thread-channel group on its own thread and
// returns each rank's status. A rank whose fn fails closes its channel at once, as a dying
// process would, so that its peers fail promptly instead of waiting for the timeout.
inline std::vector<Status> run_ranks(int size, const std::function<Status(Channel&)>& fn,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto channels = make_thread_channels(size, timeout);
  std::vector<Status> out(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      out[r] = fn(*channels[r]);
      if (!out[r].ok()) static_cast<ThreadChannel&>(*channels[r]).close();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace kolo::ops::testing
