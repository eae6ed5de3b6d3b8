// Executor: moving CUDA tensors through host memory around the CPU backend's calls.
#include "common/logging.h"
#include "coordinator/executor.h"

namespace kolo::coord {

void* Executor::host_buffer(CudaStaging::Slot slot, size_t bytes) {
  Result<void*> pinned = staging_.host_buffer(slot, bytes);
  if (pinned.ok()) return *pinned;
  if (!warned_pageable_) {
    warned_pageable_ = true;
    KOLO_LOG_WARNING("CUDA tensors are staged through pageable memory (slower): "
                     << pinned.status().to_string());
  }
  return pageable_[static_cast<size_t>(slot)].get(bytes);
}

Status Executor::stage_in(void* host, const TensorView& src, size_t bytes,
                          const std::string& name) {
  KOLO_RETURN_IF_ERROR(staging_.copy_to_host(host, src, bytes, name));
  return staging_.synchronize();
}

Status Executor::stage_out(const TensorView& dst, const void* host, size_t bytes,
                           const std::string& name) {
  KOLO_RETURN_IF_ERROR(staging_.copy_to_device(dst, host, bytes, name));
  return staging_.synchronize();
}

Result<bool> Executor::through_host(const Response& p) const {
  auto what = [&] {
    return std::string(op_type_name(p.type)) + " '" + p.name + "': backend " +
           std::string(backend().name());
  };
  if (backend().supports(p.device)) {
    // A rank that joined stands in with host memory (scratch_), which a backend taking device
    // buffers cannot use.
    if (!p.device.is_cpu() && !p.joined.empty())
      return Status::Unsupported(what() + " takes " + p.device.to_string() +
                                 " tensors directly, and a rank that joined has no device "
                                 "buffer to contribute (joined ranks: " +
                                 std::to_string(p.joined.size()) + ")");
    return false;
  }
  if (p.device.is_cuda() && backend().supports(Device::cpu())) return true;
  return Status::Unsupported(what() + " does not take " + p.device.to_string() +
                             " tensors, and they cannot be staged: the executor stages only "
                             "CUDA tensors, through host memory, for a backend that takes it");
}

Status Executor::run_single(const BatchItem& item, size_t in_bytes, void* out, size_t out_bytes,
                            const Status& alloc, TimelineArgs args, const BackendCall& call) {
  const Response& p = *item.response;
  Entry* e = item.entry;
  std::vector<BatchItem> batch{item};
  Result<bool> via_host = through_host(p);
  if (!via_host.ok()) {
    finish(batch, via_host.status());  // every rank fails it alike, before any backend call
    return Status::Ok();
  }
  const void* in = e ? e->inputs[0].data : nullptr;
  void* backend_out = out;
  Status staged = Status::Ok();
  const bool cuda = e && *via_host;
  if (cuda) {
    void* host_in = host_buffer(CudaStaging::Slot::kInput, in_bytes);
    begin(batch, "MEMCPY_D2H");
    staged = stage_in(host_in, e->inputs[0], in_bytes, p.name);
    end(batch);
    in = host_in;
    // The allocator's buffer is device memory; Kolo's own HostTensor is written directly.
    if (e->allocator && alloc.ok())
      backend_out = host_buffer(CudaStaging::Slot::kOutput, out_bytes);
  }
  begin(batch, op_span(p.type), std::move(args));
  Status st = call(in, backend_out);
  end(batch, st);
  if (st.ok() && staged.ok() && backend_out != out) {
    TensorView dst = e->inputs[0];
    dst.data = out;
    begin(batch, "MEMCPY_H2D");
    staged = stage_out(dst, backend_out, out_bytes, p.name);
    end(batch);
  }
  // No output buffer at all (not even a device stand-in): the backend refused the null, but
  // the allocation's error names the tensor and the cause.
  const bool no_output = backend_out == nullptr && out_bytes > 0 && !alloc.ok();
  finish(batch, no_output ? alloc : !st.ok() ? st : !alloc.ok() ? alloc : staged);
  return st;
}

}  // namespace kolo::coord
