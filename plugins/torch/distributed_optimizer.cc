// kolo::torch::DistributedOptimizer: the design of Kolo's own DistributedOptimizer
// (framework/distributed/distributed_optimizer.h: Note [Buckets], Note [Exact averaging]) on
// LibTorch's autograd.
//
// Hooks. Each parameter gets a post hook on its gradient accumulator (the AccumulateGrad node
// that writes param.grad), through torch::autograd::impl::grad_accumulator() and
// Node::add_post_hook, as DDP's Reducer does. Why not Tensor::register_hook: a tensor hook runs
// before the gradient is accumulated into .grad (it sees the incoming gradient, not the sum with
// earlier passes), so it cannot tell when .grad is final; the accumulator's post hook runs
// right after .grad was written. The accumulator is held weakly by the parameter, so the
// optimizer keeps a reference (as the Reducer does), which also keeps the hook alive.
//
// Averaging (Note [Exact averaging]): each rank's gradient is scaled by its sample count (set
// with set_local_batch_size; 1 when not given) divided by its backward passes, the buckets are
// summed, and step() divides by the global count N (an int64 allreduce submitted with the
// first bucket). Scaling happens locally, as Kolo requires equal scale factors on every rank.
// With weight_by_sample_count = false the allreduce averages over ranks.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/utils.h>

#include "kolo/torch.h"

namespace kolo::torch {

struct DistributedOptimizer::Impl {
  struct Param {
    std::string name;  // the parameter's name in the module
    at::Tensor tensor;
    std::shared_ptr<::torch::autograd::Node> accumulator;
    uintptr_t hook_key = 0;
    int passes_ready = 0;  // synchronised passes of this step that produced its gradient
    int passes_local = 0;  // passes under no_sync()
    size_t bucket = 0;
    at::Tensor wire;  // 16-bit copy when compressing
  };
  struct Bucket {
    std::string name;
    std::vector<size_t> params;
    size_t ready = 0;
    bool submitted = false;
    Handle handle;
  };

  DistributedOptimizer& self;
  DistributedOptions options;
  std::vector<Param> params;  // registration order
  std::vector<Bucket> buckets;
  int64_t local_count = 0;
  bool count_given = false;
  at::Tensor count;  // int64 [1], allreduced with the first bucket
  Handle count_handle;
  bool count_submitted = false;

  Impl(DistributedOptimizer& s, DistributedOptions o) : self(s), options(std::move(o)) {}

  size_t wire_bytes(const Param& p) const {
    const size_t element =
        options.compression == Compression::kNone ? p.tensor.element_size() : size_t{2};
    return static_cast<size_t>(p.tensor.numel()) * element;
  }

  // Note [Buckets]: reverse registration order, at most bucket_bytes each, one dtype each.
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
      const bool other_dtype = !current.empty() && params[current.back()].tensor.scalar_type() !=
                                                       params[k].tensor.scalar_type();
      if (!current.empty() &&
          (other_dtype || bytes + b > static_cast<size_t>(options.bucket_bytes))) {
        close();
      }
      current.push_back(k);
      bytes += b;
    }
    close();
  }

  // The gradient of params[i] is final for this step: scale it, and submit its bucket when it
  // was the bucket's last.
  void on_ready(size_t i) {
    Param& p = params[i];
    at::Tensor& grad = p.tensor.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(p.tensor);
    if (!grad.is_contiguous()) grad = grad.contiguous();
    const double weight = options.weight_by_sample_count
                              ? (count_given ? static_cast<double>(local_count) : 1.0)
                              : 1.0;
    const double scale = weight / std::max(1, p.passes_ready + p.passes_local);
    ::torch::NoGradGuard no_grad;
    if (options.compression == Compression::kNone) {
      if (scale != 1.0) grad.mul_(scale);
    } else {
      const auto type = options.compression == Compression::kFloat16 ? at::kHalf : at::kBFloat16;
      p.wire = (grad * scale).to(type);
    }
    Bucket& b = buckets[p.bucket];
    if (++b.ready == b.params.size()) submit(b);
  }

  void submit(Bucket& b) {
    if (!count_submitted) {
      count = at::full({1}, count_given ? local_count : int64_t{1}, at::kLong);
      if (options.weight_by_sample_count) {
        count_handle = allreduce_async_(options.name_prefix + ".sample_count", count);
      }
      count_submitted = true;
    }
    std::vector<at::Tensor> tensors;
    for (size_t i : b.params) {
      Param& p = params[i];
      tensors.push_back(options.compression == Compression::kNone ? p.tensor.grad() : p.wire);
    }
    AllreduceOptions op;
    op.op = options.weight_by_sample_count ? ReduceOp::kSum : ReduceOp::kAverage;
    b.handle = tensors.size() == 1 ? allreduce_async_(b.name, tensors[0], op)
                                   : grouped_allreduce_async_(b.name, tensors, op);
    b.submitted = true;
  }

  void reset_step() {
    for (Param& p : params) p.passes_ready = p.passes_local = 0;
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

DistributedOptimizer::DistributedOptimizer(
    ::torch::optim::Optimizer& inner,
    const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
    DistributedOptions options)
    : inner_(inner), impl_(std::make_unique<Impl>(*this, std::move(options))) {
  if (impl_->options.backward_passes_per_step < 1) {
    throw Error(Status::InvalidArgument("backward_passes_per_step must be >= 1, got " +
                                        std::to_string(impl_->options.backward_passes_per_step)));
  }
  if (impl_->options.bucket_bytes < 0) {
    throw Error(Status::InvalidArgument("bucket_bytes must be >= 0, got " +
                                        std::to_string(impl_->options.bucket_bytes)));
  }
  for (const auto& item : named_parameters) {
    const at::Tensor& t = item.value();
    if (!t.defined() || !t.requires_grad()) continue;
    view_of(t, item.key());  // refuses dtypes Kolo does not have, naming the parameter
    Impl::Param p;
    p.name = item.key();
    p.tensor = t;
    impl_->params.push_back(std::move(p));
  }
  impl_->build_buckets();
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    Impl::Param& p = impl_->params[i];
    p.accumulator = ::torch::autograd::impl::grad_accumulator(p.tensor);
    if (!p.accumulator) {
      throw Error(
          Status::InvalidArgument("parameter '" + p.name + "' is not a leaf that requires grad"));
    }
    Impl* impl = impl_.get();
    p.hook_key =
        p.accumulator->add_post_hook(std::make_unique<::torch::autograd::utils::LambdaPostHook>(
            [impl, i](const ::torch::autograd::variable_list& outputs,
                      const ::torch::autograd::variable_list&) {
              Impl::Param& q = impl->params[i];
              if (!impl->self.sync_) {
                ++q.passes_local;
              } else if (++q.passes_ready == impl->options.backward_passes_per_step) {
                impl->on_ready(i);
                ++impl->self.stats_.submitted_from_hooks;
              }
              return outputs;
            }));
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  for (Impl::Param& p : impl_->params) p.accumulator->del_post_hook(p.hook_key);
  // Allreduces still in flight write into gradients the caller may free: let them finish.
  for (Impl::Bucket& b : impl_->buckets) {
    if (b.submitted) (void)b.handle.raw().wait();
  }
}

void DistributedOptimizer::set_local_batch_size(int64_t n) {
  if (n < 0)
    throw Error(Status::InvalidArgument("local batch size must be >= 0, got " + std::to_string(n)));
  impl_->local_count += n;
  impl_->count_given = true;
}

void DistributedOptimizer::zero_grad() { inner_.zero_grad(); }

void DistributedOptimizer::step() {
  Impl& m = *impl_;
  // Buckets holding a parameter that no pass used: reduced now, with zeros where needed.
  for (Impl::Bucket& b : m.buckets) {
    if (b.submitted) continue;
    for (size_t i : b.params) {
      Impl::Param& p = m.params[i];
      if (p.passes_ready < m.options.backward_passes_per_step) {
        p.passes_ready = m.options.backward_passes_per_step;
        m.on_ready(i);  // submits the bucket with its last parameter
      }
    }
    ++stats_.submitted_at_step;
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
    }
  }
  inner_.step();
  ++stats_.steps;
  check(kolo::mark_step());
  m.reset_step();
}

std::vector<kolo::Handle> DistributedOptimizer::submitted_handles() const {
  std::vector<kolo::Handle> out;
  for (const Impl::Bucket& b : impl_->buckets) {
    if (b.submitted) out.push_back(b.handle.raw());
  }
  return out;
}

std::vector<std::string> DistributedOptimizer::bucket_names() const {
  std::vector<std::string> out;
  for (const Impl::Bucket& b : impl_->buckets) out.push_back(b.name);
  return out;
}

}  // namespace kolo::torch
