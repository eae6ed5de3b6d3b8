// Kolo's collectives on torch tensors: views without copies, outputs allocated as tensors.
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/thread_annotations.h"
#include "kolo/torch.h"

namespace kolo::torch {

Error::Error(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}

void check(const Status& s) {
  if (!s.ok()) throw Error(s);
}

std::optional<DataType> to_kolo_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Byte:
      return DataType::kUInt8;
    case c10::ScalarType::Char:
      return DataType::kInt8;
    case c10::ScalarType::Short:
      return DataType::kInt16;
    case c10::ScalarType::Int:
      return DataType::kInt32;
    case c10::ScalarType::Long:
      return DataType::kInt64;
    case c10::ScalarType::Half:
      return DataType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DataType::kBFloat16;
    case c10::ScalarType::Float:
      return DataType::kFloat32;
    case c10::ScalarType::Double:
      return DataType::kFloat64;
    default:
      return std::nullopt;
  }
}

c10::ScalarType to_torch_dtype(DataType type) {
  switch (type) {
    case DataType::kUInt8:
      return c10::ScalarType::Byte;
    case DataType::kInt8:
      return c10::ScalarType::Char;
    case DataType::kInt16:
      return c10::ScalarType::Short;
    case DataType::kInt32:
      return c10::ScalarType::Int;
    case DataType::kInt64:
      return c10::ScalarType::Long;
    case DataType::kFloat16:
      return c10::ScalarType::Half;
    case DataType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case DataType::kFloat32:
      return c10::ScalarType::Float;
    case DataType::kFloat64:
      return c10::ScalarType::Double;
  }
  throw Error(
      Status::InvalidArgument("unknown Kolo dtype " + std::to_string(static_cast<int>(type))));
}

TensorView view_of(const at::Tensor& t, const std::string& name) {
  if (!t.defined()) throw Error(Status::InvalidArgument("tensor '" + name + "' is undefined"));
  const std::optional<DataType> dtype = to_kolo_dtype(t.scalar_type());
  if (!dtype) {
    throw Error(Status::InvalidArgument(
        "tensor '" + name + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
        ", which Kolo does not reduce (uint8, int8, int32, int64, float16, bfloat16, float32, "
        "float64)"));
  }
  if (!t.is_contiguous()) {
    throw Error(Status::InvalidArgument("tensor '" + name + "' is not contiguous"));
  }
  TensorView v;
  v.data = t.data_ptr();
  v.shape.assign(t.sizes().begin(), t.sizes().end());
  v.dtype = *dtype;
  if (t.is_cuda()) {
    v.device = Device::cuda(t.device().index());
  } else if (!t.is_cpu()) {
    throw Error(Status::InvalidArgument("tensor '" + name + "' is on " + t.device().str() +
                                        "; Kolo takes cpu and cuda tensors"));
  }
  return v;
}

void init() { check(kolo::init()); }
void shutdown() { check(kolo::shutdown()); }

struct Handle::State {
  kolo::Handle handle;
  std::vector<at::Tensor> inputs;   // kept alive until completion
  std::vector<at::Tensor> outputs;  // what wait() returns
  // Non-contiguous in-place inputs: (the caller's tensor, the contiguous copy reduced).
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;
  // CUDA: events recorded on the current stream after the producer's kernels.
  std::vector<std::pair<void*, c10::Device>> ready_events;
  ~State() {
    for (auto& [event, device] : ready_events) {
      c10::impl::VirtualGuardImpl(device.type()).destroyEvent(event, device.index());
    }
  }
  at::Tensor allocated;  // allgather/alltoall/reducescatter output
  bool copied = false;
};

namespace {

// States whose handles were dropped before their operation completed: Kolo still reads and
// writes their tensors. Freed on a caller's thread once complete, never on Kolo's background
// thread: freeing a tensor that Python owns takes the GIL, which a Python thread waiting on
// Kolo (shutdown) may hold.
Mutex orphans_mu;
std::vector<std::unique_ptr<Handle::State>> orphans KOLO_GUARDED_BY(orphans_mu);

void sweep_orphans() {
  std::vector<std::unique_ptr<Handle::State>> done;
  {
    MutexLock lock(orphans_mu);
    for (auto& o : orphans) {
      if (o->handle.poll()) done.push_back(std::move(o));
    }
    orphans.erase(std::remove(orphans.begin(), orphans.end(), nullptr), orphans.end());
  }
}  // `done` frees here, outside the lock

}  // namespace

Handle make_handle(std::unique_ptr<Handle::State> s) {
  sweep_orphans();
  // Refused at submission (Runtime::submit completes such a handle before returning): raise at
  // the call, where Horovod raises, not at a wait() the caller may never reach.
  if (s->handle.valid() && s->handle.poll() &&
      s->handle.status().code() == StatusCode::kInvalidArgument)
    throw Error(s->handle.status());
  Handle h;
  h.state_ = std::shared_ptr<Handle::State>(s.release(), [](Handle::State* p) {
    if (p->handle.valid() && !p->handle.poll()) {
      MutexLock lock(orphans_mu);
      orphans.emplace_back(p);
    } else {
      delete p;
    }
  });
  return h;
}

bool Handle::poll() const { return state_ && state_->handle.poll(); }

std::vector<at::Tensor> Handle::wait() const {
  if (!state_) throw Error(Status::PreconditionFailed("wait() on an empty kolo::torch::Handle"));
  check(state_->handle.wait());
  if (!state_->copied) {
    for (auto& [dst, src] : state_->copy_back) dst.copy_(src);
    state_->copied = true;
  }
  if (state_->allocated.defined() && state_->outputs.empty()) {
    state_->outputs.push_back(state_->allocated);
  }
  return state_->outputs;
}

std::vector<int64_t> Handle::received_splits() const {
  return state_ ? state_->handle.received_splits() : std::vector<int64_t>{};
}

const kolo::Handle& Handle::raw() const {
  static const kolo::Handle empty;
  return state_ ? state_->handle : empty;
}

namespace {

// The view of `t` that the operation reads (and, in place, writes): `t` itself when
// contiguous, else a contiguous copy recorded for copy-back. On CUDA, records the ready event.
TensorView prepare(Handle::State& s, const at::Tensor& t, const std::string& name, bool in_place) {
  at::Tensor c = t;
  if (t.defined() && !t.is_contiguous()) {
    c = t.contiguous();
    if (in_place) s.copy_back.emplace_back(t, c);
  }
  TensorView v = view_of(c, name);
  s.inputs.push_back(c);
  if (c.is_cuda()) {
    // The producer's kernels run on the current stream: Kolo must read after them.
    // Through c10's device-generic interface, so this file needs no CUDA headers.
    c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
    void* event = nullptr;
    guard.record(&event, guard.getStream(c.device()), c.device().index(),
                 c10::EventFlag::PYTORCH_DEFAULT);
    s.ready_events.emplace_back(event, c.device());
    v.ready_event = event;
  }
  return v;
}

// An OutputAllocator that allocates a tensor like `like` (dtype, device) and keeps it in `s`.
OutputAllocator allocate_into(const std::unique_ptr<Handle::State>& s, const at::Tensor& like) {
  const at::TensorOptions options = like.options();
  Handle::State* raw = s.get();  // kept alive until completion (make_handle)
  return [raw, options](const std::vector<int64_t>& shape, DataType) -> void* {
    raw->allocated = at::empty(shape, options);
    return raw->allocated.data_ptr();
  };
}

}  // namespace

Handle allreduce_async_(const std::string& name, const at::Tensor& tensor, AllreduceOptions opts) {
  auto s = std::make_unique<Handle::State>();
  TensorView v = prepare(*s, tensor, name, /*in_place=*/true);
  s->outputs = {tensor};
  s->handle = kolo::allreduce_async(name, v, opts);
  return make_handle(std::move(s));
}

Handle allreduce_async(const std::string& name, const at::Tensor& tensor, AllreduceOptions opts) {
  auto s = std::make_unique<Handle::State>();
  TensorView in = prepare(*s, tensor, name, /*in_place=*/false);
  at::Tensor out = at::empty_like(s->inputs.back(), at::MemoryFormat::Contiguous);
  TensorView ov = view_of(out, name);
  // `out` may reuse a block the current stream still reads: write it only after that stream's
  // work so far, which the input's ready event (recorded on it) marks.
  ov.ready_event = in.ready_event;
  s->outputs = {out};
  s->handle = kolo::allreduce_async(name, in, ov, opts);
  return make_handle(std::move(s));
}

Handle grouped_allreduce_async_(const std::string& name, const std::vector<at::Tensor>& tensors,
                                AllreduceOptions opts) {
  auto s = std::make_unique<Handle::State>();
  std::vector<TensorView> views;
  for (size_t i = 0; i < tensors.size(); ++i) {
    views.push_back(prepare(*s, tensors[i], name + "[" + std::to_string(i) + "]", true));
  }
  s->outputs = tensors;
  s->handle = kolo::grouped_allreduce_async(name, std::move(views), opts);
  return make_handle(std::move(s));
}

Handle grouped_allreduce_async(const std::string& name, const std::vector<at::Tensor>& tensors,
                               AllreduceOptions opts) {
  std::vector<at::Tensor> copies;
  for (const at::Tensor& t : tensors) {
    copies.push_back(t.defined() ? t.clone(at::MemoryFormat::Contiguous) : t);
  }
  return grouped_allreduce_async_(name, copies, opts);
}

Handle allgather_async(const std::string& name, const at::Tensor& tensor,
                       const ProcessSet& process_set) {
  auto s = std::make_unique<Handle::State>();
  TensorView v = prepare(*s, tensor, name, false);
  s->handle = kolo::allgather_async(
      name, v, {.allocator = allocate_into(s, tensor), .process_set = process_set});
  return make_handle(std::move(s));
}

Handle broadcast_async_(const std::string& name, const at::Tensor& tensor, int root,
                        const ProcessSet& process_set) {
  auto s = std::make_unique<Handle::State>();
  TensorView v = prepare(*s, tensor, name, true);
  s->outputs = {tensor};
  s->handle = kolo::broadcast_async(name, v, {.root = root, .process_set = process_set});
  return make_handle(std::move(s));
}

Handle broadcast_async(const std::string& name, const at::Tensor& tensor, int root,
                       const ProcessSet& process_set) {
  return broadcast_async_(name,
                          tensor.defined() ? tensor.clone(at::MemoryFormat::Contiguous) : tensor,
                          root, process_set);
}

Handle alltoall_async(const std::string& name, const at::Tensor& tensor,
                      std::vector<int64_t> splits, const ProcessSet& process_set) {
  auto s = std::make_unique<Handle::State>();
  TensorView v = prepare(*s, tensor, name, false);
  s->handle = kolo::alltoall_async(name, v,
                                   {.splits = std::move(splits),
                                    .allocator = allocate_into(s, tensor),
                                    .process_set = process_set});
  return make_handle(std::move(s));
}

Handle reducescatter_async(const std::string& name, const at::Tensor& tensor,
                           AllreduceOptions opts) {
  // The options may be in 0.2's flat spelling, which effective_reduction() reads too.
  Result<Reduction> reduction = effective_reduction(opts);
  check(reduction.status().with_context("reducescatter '" + name + "'"));
  auto s = std::make_unique<Handle::State>();
  TensorView v = prepare(*s, tensor, name, false);
  s->handle = kolo::reducescatter_async(name, v,
                                        {.reduction = *reduction,
                                         .allocator = allocate_into(s, tensor),
                                         .process_set = opts.process_set});
  return make_handle(std::move(s));
}

at::Tensor allreduce(const std::string& name, const at::Tensor& tensor, AllreduceOptions opts) {
  return allreduce_async(name, tensor, opts).wait_one();
}
void allreduce_(const std::string& name, const at::Tensor& tensor, AllreduceOptions opts) {
  allreduce_async_(name, tensor, opts).wait();
}
at::Tensor allgather(const std::string& name, const at::Tensor& tensor,
                     const ProcessSet& process_set) {
  return allgather_async(name, tensor, process_set).wait_one();
}
void broadcast_(const std::string& name, const at::Tensor& tensor, int root,
                const ProcessSet& process_set) {
  broadcast_async_(name, tensor, root, process_set).wait();
}
void barrier(const std::string& name, const ProcessSet& process_set) {
  check(kolo::barrier(name, process_set));
}
int join() {
  Result<int> last = kolo::join();
  check(last.status());
  return last.value();
}

void broadcast_parameters(const ::torch::nn::Module& module, int root) {
  ::torch::NoGradGuard no_grad;
  std::vector<Handle> handles;
  for (const auto& p : module.named_parameters()) {
    handles.push_back(broadcast_async_("bcast.param." + p.key(), p.value(), root));
  }
  for (const auto& b : module.named_buffers()) {
    handles.push_back(broadcast_async_("bcast.buffer." + b.key(), b.value(), root));
  }
  for (const Handle& h : handles) h.wait();
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root) {
  std::string bytes;
  if (rank() == root) {
    ::torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  at::Tensor n = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  broadcast_("bcast.optimizer_state.size", n, root);
  at::Tensor buf = at::empty({n.item<int64_t>()}, at::kByte);
  if (rank() == root) std::memcpy(buf.data_ptr(), bytes.data(), bytes.size());
  broadcast_("bcast.optimizer_state", buf, root);
  if (rank() != root) {
    std::istringstream in(
        std::string(static_cast<const char*>(buf.data_ptr()), static_cast<size_t>(buf.numel())));
    ::torch::serialize::InputArchive archive;
    archive.load_from(in);
    optimizer.load(archive);
  }
}

std::unique_ptr<::torch::data::samplers::DistributedRandomSampler> make_random_sampler(
    size_t dataset_size) {
  return std::make_unique<::torch::data::samplers::DistributedRandomSampler>(
      dataset_size, static_cast<size_t>(size()), static_cast<size_t>(rank()));
}

std::unique_ptr<::torch::data::samplers::DistributedSequentialSampler> make_sequential_sampler(
    size_t dataset_size) {
  return std::make_unique<::torch::data::samplers::DistributedSequentialSampler>(
      dataset_size, static_cast<size_t>(size()), static_cast<size_t>(rank()));
}

}  // namespace kolo::torch
