// SyncBatchNorm: batch normalisation whose batch statistics cover the global batch (every
// rank's samples), for models whose local batches are too small for good statistics.
//
// SyncBatchStatsReducer plugs into batch_norm_train (functional.h, BatchStatsReducer): in
// forward it allreduces the per-channel sum, sum of squares and count; in backward the two
// per-channel gradient sums. With one rank it changes nothing.
//
// Uneven local batches (Note [Exact averaging] in distributed_optimizer.h): each rank's
// gradients come from the mean loss over its own n_r samples and are weighted by n_r / N later,
// so the backward sums are combined as (1 / n_r) * sum_r' n_r' * s_r', i.e. in this rank's own
// scale. With even batches that is the plain sum; with uneven ones P-rank training still equals
// 1-rank training on the union of the batches. Give each BatchNorm layer its
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
  int64_t local_count_ = 0;  // this rank's values per channel in the last forward
};

}  // namespace kolo::fw
