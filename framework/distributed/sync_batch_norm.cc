#include "framework/distributed/sync_batch_norm.h"

#include "framework/distributed/tensor_view.h"
#include "kolo/kolo.h"

namespace kolo::fw {
namespace {

void throw_if_error(const Status& status) {
  if (!status.ok()) throw Error(status);
}

}  // namespace

void SyncBatchStatsReducer::reduce_forward(Tensor& sum, Tensor& sum_sq, int64_t& count) {
  if (size() == 1) return;
  local_count_ = count;
  Handle counts = allreduce_async(name_ + ".count", view_of(&count, {}));
  Status stats = grouped_allreduce(name_ + ".stats", {view_of_tensor(sum), view_of_tensor(sum_sq)});
  Status counted = counts.wait();
  throw_if_error(stats);
  throw_if_error(counted);
}

void SyncBatchStatsReducer::reduce_backward(Tensor& sum_gy, Tensor& sum_gy_xhat) {
  if (size() == 1) return;
  const auto weight = static_cast<float>(local_count_);
  sum_gy.mul_(weight);
  sum_gy_xhat.mul_(weight);
  throw_if_error(
      grouped_allreduce(name_ + ".grad", {view_of_tensor(sum_gy), view_of_tensor(sum_gy_xhat)}));
  if (local_count_ > 0) {
    sum_gy.mul_(1.0f / weight);
    sum_gy_xhat.mul_(1.0f / weight);
  }
}

}  // namespace kolo::fw
