// The members of ShardedOptimizer's private structs, shared by its two source files
// (sharded_optimizer.cc: construction, hooks, submission, memory; sharded_step.cc: the step).
// Not a public header.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/distributed/sharded_optimizer.h"

namespace kolo::fw {

struct ShardedOptimizer::Param {
  std::string name;
  Tensor tensor;
  int64_t index = 0;  // in the wrapped optimizer's flattened order
  int64_t numel = 0;
  double lr_scale = 1;
  std::optional<double> weight_decay;  // the group's override
  int hook_id = -1;
  int passes_ready = 0;
  size_t bucket = 0;
};

struct ShardedOptimizer::Bucket {
  std::string name;
  std::vector<Segment> owned;              // this rank's parts of parameters
  std::vector<std::vector<Tensor>> state;  // [owned segment][slot]
  Tensor flat;                             // E floats: the gradients (Note [Gradient views])
  Tensor params;      // E floats: the parameters' storage (Note [Flat parameters])
  Tensor wire;        // with compression: the 16-bit copy of `flat` that travels
  Tensor wire_shard;  // and the 16-bit reduced shard, widened into shard_grad
  Tensor shard_grad;  // this rank's share of the reduced gradient
  size_t ready = 0;
  bool submitted = false;
  Handle reduce;
  Handle gather;
  // CUDA: the ready events of the reduce-scatter's and the allgather's inputs (ready_view).
  std::shared_ptr<void> reduce_ready;
  std::shared_ptr<void> gather_ready;
};

namespace sharded_detail {
inline float* f32(const Tensor& t) { return static_cast<float*>(t.raw_data()); }
}  // namespace sharded_detail

}  // namespace kolo::fw
