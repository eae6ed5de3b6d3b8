// kolo::torch::GradientReducer and DistributedOptimizer: the design of Kolo's own
// DistributedOptimizer (framework/distributed/distributed_optimizer.h: Note [Buckets], Note
// [Exact averaging]) on LibTorch's autograd. The reducer does the communication, the optimizer
// adds a torch::optim::Optimizer's step; kolo.torch's Python DistributedOptimizer drives the
// reducer, so Python runs no code per parameter or per bucket (one synchronize() per step).
//
// Hooks. Each parameter gets a post hook on its gradient accumulator (the AccumulateGrad node
// that writes param.grad), through torch::autograd::impl::grad_accumulator() and
// Node::add_post_hook, as DDP's Reducer does. Why not Tensor::register_hook: a tensor hook runs
// before the gradient is accumulated into .grad (it sees the incoming gradient, not the sum with
// earlier passes), so it cannot tell when .grad is final; the accumulator's post hook runs
// right after .grad was written. The accumulator is held weakly by the parameter, so the
// reducer keeps a reference (as the Reducer does), which also keeps the hook alive. The hooks
// are C++: under Python's backward() they run without the GIL.
//
// Averaging (Note [Exact averaging]): each rank's gradient is scaled by its sample count (set
// with set_local_batch_size; 1 when not given), divided by its backward passes when
// mean_over_passes, the buckets are summed, and synchronize() divides by the global count N
// (an int64 allreduce submitted with the first bucket). Scaling happens locally, as Kolo
// requires equal scale factors on every rank. With weight_by_sample_count = false the allreduce
// applies options.op (average or sum over ranks).
//
// Buckets follow the autotuner: mark_step() rebuilds them when kolo::tuned_bucket_bytes()
// changed, which happens at the same step on every rank (Note [Autotune] in
// coordinator/autotune.h), so bucket names agree across ranks.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/utils.h>

#include "kolo/torch.h"

namespace kolo::torch {

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(Status::InvalidArgument("DistributedOptimizer: " + message));
}

}  // namespace

struct GradientReducer::Impl {
  struct Param {
    std::string name;  // the parameter's name in the module
    at::Tensor tensor;
    std::shared_ptr<::torch::autograd::Node> accumulator;
    uintptr_t hook_key = 0;
    int passes_ready = 0;  // synchronised passes of this step that produced its gradient
    int passes_local = 0;  // passes under no_sync()
    size_t bucket = 0;
    at::Tensor wire;      // 16-bit copy when compressing
    bool sparse = false;  // this step's gradient came sparse: reduced dense, returned sparse
  };
  struct Bucket {
    std::string name;
    std::vector<size_t> params;
    size_t ready = 0;
    bool submitted = false;
    Handle handle;
  };

  const GradientReducer& self;
  DistributedOptions options;
  int64_t bucket_bytes;       // options.bucket_bytes, or the autotuner's
  std::vector<Param> params;  // registration order
  std::vector<Bucket> buckets;
  int64_t local_count = 0;
  bool count_given = false;
  at::Tensor count;  // int64 [1], allreduced with the first bucket
  Handle count_handle;
  bool count_submitted = false;
  DistributedStats stats;

  Impl(const GradientReducer& s, DistributedOptions o)
      : self(s), options(std::move(o)), bucket_bytes(options.bucket_bytes) {}

  size_t wire_bytes(const Param& p) const {
    const size_t element =
        options.compression == Compression::kNone ? p.tensor.element_size() : size_t{2};
    return static_cast<size_t>(p.tensor.numel()) * element;
  }

  // Note [Buckets]: reverse registration order, at most bucket_bytes each, one dtype and
  // device each.
  void build_buckets() {
    buckets.clear();
    std::vector<size_t> current;
    size_t bytes = 0;
    auto close = [&] {
      if (current.empty()) return;
      Bucket b;
      b.params = current;
      const std::string prefix = options.name_prefix + ".";
      if (current.size() == 1) {
        b.name = prefix + params[current[0]].name;
      } else {
        b.name = prefix + "bucket" + std::to_string(buckets.size()) + "(" +
                 params[current.front()].name + ".." + params[current.back()].name + ")";
      }
      for (size_t i : current) params[i].bucket = buckets.size();
      buckets.push_back(std::move(b));
      current.clear();
      bytes = 0;
    };
    for (size_t k = params.size(); k-- > 0;) {
      const size_t b = wire_bytes(params[k]);
      bool fresh = !current.empty() && bytes + b > static_cast<size_t>(bucket_bytes);
      if (!current.empty()) {
        const at::Tensor& head = params[current.back()].tensor;
        fresh = fresh || head.scalar_type() != params[k].tensor.scalar_type() ||
                head.device() != params[k].tensor.device();
      }
      if (fresh) close();
      current.push_back(k);
      bytes += b;
    }
    close();
  }

  // The hook of params[i]: one backward pass wrote its .grad.
  void on_pass(size_t i) {
    Param& p = params[i];
    if (self.no_sync_depth_ > 0) {
      ++p.passes_local;
      return;
    }
    if (p.passes_ready == options.backward_passes_per_step) {
      throw Error(Status::PreconditionFailed(
          "gradient of '" + p.name + "' computed more than backward_passes_per_step (" +
          std::to_string(options.backward_passes_per_step) +
          ") times before step() or synchronize(); increase backward_passes_per_step to "
          "accumulate gradients locally"));
    }
    if (++p.passes_ready == options.backward_passes_per_step) {
      on_ready(i);
      ++stats.submitted_from_hooks;
    }
  }

  // The gradient of params[i] is final for this step: scale it, and submit its bucket when it
  // was the bucket's last.
  void on_ready(size_t i) {
    Param& p = params[i];
    at::Tensor& grad = p.tensor.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(p.tensor);
    if (grad.is_sparse()) {
      // nn.Embedding(sparse=true): reduced as a dense tensor (Horovod's sparse_as_dense) in the
      // bucket; synchronize() makes it sparse again for the optimizer (SparseAdam takes no other).
      grad = grad.to_dense();
      p.sparse = true;
    }
    if (!grad.is_contiguous()) grad = grad.contiguous();
    const double weight =
        options.weight_by_sample_count && count_given ? static_cast<double>(local_count) : 1.0;
    const int passes = options.mean_over_passes ? std::max(1, p.passes_ready + p.passes_local) : 1;
    const double scale = weight / passes;
    ::torch::NoGradGuard no_grad;
    if (options.compression == Compression::kNone) {
      if (scale != 1.0) grad.mul_(scale);
    } else {
      const auto type = options.compression == Compression::kFloat16 ? at::kHalf : at::kBFloat16;
      p.wire = (scale != 1.0 ? grad * scale : grad).to(type);
    }
    Bucket& b = buckets[p.bucket];
    if (++b.ready == b.params.size()) submit(b);
  }

  void submit(Bucket& b) {
    if (!count_submitted) {
      count = at::full({1}, count_given ? local_count : int64_t{1}, at::kLong);
      if (options.weight_by_sample_count) {
        count_handle = allreduce_async_(options.name_prefix + ".sample_count", count,
                                        {.process_set = options.process_set});
      }
      count_submitted = true;
    }
    std::vector<at::Tensor> tensors;
    tensors.reserve(b.params.size());
    for (size_t i : b.params) {
      Param& p = params[i];
      tensors.push_back(options.compression == Compression::kNone ? p.tensor.grad() : p.wire);
    }
    const AllreduceOptions op{
        .reduction = {.op = options.weight_by_sample_count ? ReduceOp::kSum : options.op,
                      .prescale = 1.0 / options.gradient_predivide_factor,
                      .postscale = options.gradient_predivide_factor},
        .process_set = options.process_set};
    b.handle = tensors.size() == 1 ? allreduce_async_(b.name, tensors[0], op)
                                   : grouped_allreduce_async_(b.name, tensors, op);
    b.submitted = true;
    ++stats.allreduces;
  }

  void reset_step() {
    for (Param& p : params) {
      p.passes_ready = p.passes_local = 0;
      p.sparse = false;
    }
    for (Bucket& b : buckets) {
      b.ready = 0;
      b.submitted = false;
      b.handle = Handle();
    }
    local_count = 0;
    count_given = false;
    count_submitted = false;
    count_handle = Handle();
  }
};

GradientReducer::GradientReducer(
    const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
    DistributedOptions options)
    : impl_(std::make_unique<Impl>(*this, std::move(options))) {
  Impl& m = *impl_;
  if (m.options.backward_passes_per_step < 1) {
    invalid("backward_passes_per_step must be >= 1, got " +
            std::to_string(m.options.backward_passes_per_step));
  }
  if (m.options.bucket_bytes < 0) {
    invalid("bucket_bytes must be >= 0, got " + std::to_string(m.options.bucket_bytes));
  }
  if (!(m.options.gradient_predivide_factor > 0)) {
    invalid("gradient_predivide_factor must be > 0, got " +
            std::to_string(m.options.gradient_predivide_factor));
  }
  if (!m.options.weight_by_sample_count && m.options.op != ReduceOp::kAverage &&
      m.options.op != ReduceOp::kSum) {
    invalid("gradients are averaged or summed, got reduce op " +
            std::to_string(static_cast<int>(m.options.op)));
  }
  for (const auto& item : named_parameters) {
    const at::Tensor& t = item.value();
    if (!t.defined() || !t.requires_grad()) continue;
    view_of(t, item.key());  // refuses dtypes Kolo does not have, naming the parameter
    Impl::Param p;
    p.name = item.key();
    p.tensor = t;
    m.params.push_back(std::move(p));
  }
  if (std::optional<int64_t> tuned = tuned_bucket_bytes()) m.bucket_bytes = *tuned;
  m.build_buckets();
  for (size_t i = 0; i < m.params.size(); ++i) {
    Impl::Param& p = m.params[i];
    p.accumulator = ::torch::autograd::impl::grad_accumulator(p.tensor);
    if (!p.accumulator) invalid("parameter '" + p.name + "' is not a leaf that requires grad");
    Impl* impl = impl_.get();
    p.hook_key =
        p.accumulator->add_post_hook(std::make_unique<::torch::autograd::utils::LambdaPostHook>(
            [impl, i](const ::torch::autograd::variable_list& outputs,
                      const ::torch::autograd::variable_list&) {
              impl->on_pass(i);
              return outputs;
            }));
  }
}

GradientReducer::~GradientReducer() {
  for (Impl::Param& p : impl_->params) p.accumulator->del_post_hook(p.hook_key);
  // Allreduces still in flight write into gradients the caller may free: let them finish.
  for (Impl::Bucket& b : impl_->buckets) {
    if (b.handle.raw().valid()) (void)b.handle.raw().wait();
  }
  if (impl_->count_handle.raw().valid()) (void)impl_->count_handle.raw().wait();
}

void GradientReducer::set_local_batch_size(int64_t n) {
  if (n < 0) invalid("local batch size must be >= 0, got " + std::to_string(n));
  impl_->local_count += n;
  impl_->count_given = true;
}

void GradientReducer::synchronize() {
  Impl& m = *impl_;
  // Buckets holding a parameter that no pass made final: reduced now, with zeros where needed.
  for (Impl::Bucket& b : m.buckets) {
    if (b.submitted) continue;
    for (size_t i : b.params) {
      Impl::Param& p = m.params[i];
      if (p.passes_ready < m.options.backward_passes_per_step) {
        p.passes_ready = m.options.backward_passes_per_step;
        m.on_ready(i);  // submits the bucket with its last parameter
      }
    }
    ++m.stats.submitted_at_step;
  }
  std::optional<Error> failure;
  auto wait = [&](const Handle& h) {
    try {
      h.wait();
    } catch (const Error& e) {
      if (!failure) failure = e;
    }
  };
  if (m.options.weight_by_sample_count) wait(m.count_handle);
  for (const Impl::Bucket& b : m.buckets) wait(b.handle);
  if (failure) {
    m.reset_step();
    throw *failure;
  }
  {
    ::torch::NoGradGuard no_grad;
    const double total =
        m.options.weight_by_sample_count ? static_cast<double>(m.count.item<int64_t>()) : 1.0;
    for (Impl::Param& p : m.params) {
      at::Tensor& grad = p.tensor.mutable_grad();
      if (m.options.compression != Compression::kNone) grad.copy_(p.wire);
      if (total == 0) {
        grad.zero_();  // no rank had samples: no update from gradients
      } else if (total != 1.0) {
        grad.div_(total);
      }
      if (p.sparse) grad = grad.to_sparse();
    }
  }
  ++m.stats.steps;
  m.reset_step();
}

void GradientReducer::mark_step() {
  check(kolo::mark_step());
  Impl& m = *impl_;
  std::optional<int64_t> tuned = tuned_bucket_bytes();
  if (tuned && *tuned != m.bucket_bytes) {
    m.bucket_bytes = *tuned;
    m.build_buckets();
  }
}

void GradientReducer::abandon_step() { impl_->reset_step(); }

bool GradientReducer::pending() const {
  for (const Impl::Bucket& b : impl_->buckets) {
    if (b.submitted) return true;
  }
  return false;
}

const DistributedStats& GradientReducer::stats() const { return impl_->stats; }

std::vector<Handle> GradientReducer::submitted_handles() const {
  std::vector<Handle> out;
  for (const Impl::Bucket& b : impl_->buckets) {
    if (b.submitted) out.push_back(b.handle);
  }
  return out;
}

std::vector<std::string> GradientReducer::bucket_names() const {
  std::vector<std::string> out;
  for (const Impl::Bucket& b : impl_->buckets) out.push_back(b.name);
  return out;
}

DistributedOptimizer::DistributedOptimizer(
    ::torch::optim::Optimizer& inner,
    const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
    DistributedOptions options)
    : inner_(inner), reducer_(named_parameters, std::move(options)) {}

void DistributedOptimizer::step() {
  reducer_.synchronize();
  inner_.step();
  reducer_.mark_step();
}

}  // namespace kolo::torch
