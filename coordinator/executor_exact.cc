// KOLO_REDUCTION=exact in the executor (Note [Exact reduction] in ops/exact.cc): float sums and
// averages go to the backend as int64 superaccumulators, summed there like any integers, and are
// rounded once here. Any backend that sums int64 will do, so mpi and nccl (on host memory) take
// part too.
#include <algorithm>

#include "backends/exact_allreduce.h"
#include "coordinator/executor.h"
#include "ops/exact.h"
#include "ops/reduce.h"

namespace kolo::coord {

bool Executor::exact_applies(const Response& p) const {
  return exact_ && ops::exact_dtype(p.dtype) &&
         (p.reduction.op == ReduceOp::kSum || p.reduction.op == ReduceOp::kAverage);
}

Status Executor::exact_refusal(const Response& p, bool via_host) const {
  if (!via_host && !p.device.is_cpu())
    return Status::Unsupported(
        "KOLO_REDUCTION=exact: " + std::string(op_type_name(p.type)) + " '" + p.name + "' of " +
        p.device.to_string() + " tensors on backend " + std::string(backend().name()) +
        ": the accumulators are built in host memory; stage them through a backend that takes CPU "
        "tensors (KOLO_GPU_OPERATIONS) (docs/determinism.md)");
  return ops::exact_supported(p.dtype, backend().size());
}

Status Executor::allreduce_exact(const AllreducePlan& plan, bool cuda) {
  const Response& head = plan.head;
  const size_t total_bytes = static_cast<size_t>(plan.total) * plan.esize;
  auto* buffer = static_cast<char*>(cuda ? host_buffer(CudaStaging::Slot::kFusion, total_bytes)
                                         : fusion_buffer_.get(total_bytes));
  begin(plan.batch, cuda ? "MEMCPY_D2H" : "MEMCPY_IN_FUSION");
  Status staged = copy_into_fusion(plan, buffer, cuda);  // prescaled; joined ranks add 0
  end(plan.batch);
  begin(plan.batch, op_span(OpType::kAllreduce), plan.args);
  const int64_t divisor = head.reduction.op == ReduceOp::kAverage ? plan.active : 1;
  Status st = exact_allreduce(backend(), buffer, plan.total, head.dtype, divisor, exact_acc_);
  end(plan.batch, st);
  if (st.ok() && staged.ok()) {
    AllreducePlan out = plan;
    out.divide_here = false;  // divided in the rounding
    begin(plan.batch, cuda ? "MEMCPY_H2D" : "MEMCPY_OUT_FUSION");
    staged = copy_out_of_fusion(out, buffer, cuda);  // the postscale
    end(plan.batch);
  }
  finish(plan.batch, st.ok() ? staged : st);
  return st;
}

Status Executor::reducescatter_exact(const void* in, void* out, const Response& p,
                                     const std::vector<int64_t>& counts) {
  const int limbs = ops::exact_limbs(p.dtype);
  const size_t esize = dtype_size(p.dtype);
  int64_t total = 0;
  std::vector<int64_t> acc_counts;
  for (int64_t c : counts) {
    total += c;
    acc_counts.push_back(c * limbs);
  }
  const int me = backend().rank();
  auto* scaled = static_cast<char*>(prescaled_.get(static_cast<size_t>(total) * esize));
  ops::scale_copy(p.dtype, scaled, in, total, p.reduction.prescale);
  auto* acc = static_cast<int64_t*>(
      exact_acc_.get(static_cast<size_t>(total + counts[me]) * limbs * sizeof(int64_t)));
  int64_t* mine = acc + total * limbs;
  ops::exact_encode(p.dtype, scaled, total, acc);
  KOLO_RETURN_IF_ERROR(
      backend().reducescatter(acc, mine, DataType::kInt64, {ReduceOp::kSum}, acc_counts));
  const int64_t divisor = p.reduction.op == ReduceOp::kAverage ? backend().size() : 1;
  ops::exact_round(p.dtype, mine, counts[me], divisor, out);
  ops::scale(p.dtype, out, counts[me], p.reduction.postscale);
  return Status::Ok();
}

void Executor::reduce_gathered_exactly(const Response& p, const std::vector<const void*>& inputs,
                                       void* out, int64_t n) {
  const int limbs = ops::exact_limbs(p.dtype);
  auto* acc = static_cast<int64_t*>(exact_acc_.get(static_cast<size_t>(n * limbs) * 8));
  std::fill(acc, acc + n * limbs, 0);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(p.dtype);
  for (const void* in : inputs) {
    void* scaled = prescaled_.get(bytes);
    ops::scale_copy(p.dtype, scaled, in, n, p.reduction.prescale);
    ops::exact_accumulate(p.dtype, scaled, n, acc);
  }
  const int64_t divisor =
      p.reduction.op == ReduceOp::kAverage ? static_cast<int64_t>(inputs.size()) : 1;
  ops::exact_round(p.dtype, acc, n, divisor, out);
  ops::scale(p.dtype, out, n, p.reduction.postscale);
}

}  // namespace kolo::coord
