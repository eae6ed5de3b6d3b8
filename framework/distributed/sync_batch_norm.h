// SyncBatchNorm: batch normalisation whose batch statistics cover the global batch (every
// rank's samples), for models whose local batches are too small for good statistics.
//
// SyncBatchStatsReducer plugs into batch_norm_train (functional.h, BatchStatsReducer): in
// forward it allreduces the per-channel sum, sum of squares and count; in backward the two
// per-channel gradient sums. With one rank it changes nothing. Give each BatchNorm layer its
// own reducer with a distinct name (the allreduce names derive from it); use the same names
// on every rank.
//
// Errors: a failed allreduce throws kolo::Error with Kolo's Status (naming the tensor).
// Thread-safety: one forward/backward at a time per reducer.
#pragma once

#include <string>

#include "framework/functional.h"

namespace kolo::fw {

class SyncBatchStatsReducer : public BatchStatsReducer {
 public:
  explicit SyncBatchStatsReducer(std::string name) : name_(std::move(name)) {}
  void reduce_forward(Tensor& sum, Tensor& sum_sq, int64_t& count) override;
  void reduce_backward(Tensor& sum_gy, Tensor& sum_gy_xhat) override;

 private:
  std::string name_;
};

}  // namespace kolo::fw
