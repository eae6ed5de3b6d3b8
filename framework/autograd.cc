#include "framework/autograd.h"

#include <atomic>
#include <unordered_map>

#include "framework/memory_stats.h"

namespace kolo::fw {
namespace {

thread_local bool t_grad_enabled = true;
// The latest pass on this thread, holding its leaves weakly: a model destroyed after its last
// backward must release its parameters and gradients then, not at the next backward.
struct LastReport {
  uint64_t pass = 0;
  std::vector<std::weak_ptr<TensorImpl>> ready;
};
thread_local LastReport t_last_report;
std::atomic<uint64_t> g_pass_counter{0};

[[noreturn]] void fail(const std::string& msg) { throw Error(Status::InvalidArgument(msg)); }

// Adds g into the running sum held in slot (allocating a private copy the first time, because g
// may alias a Node's buffer or another slot).
void accumulate(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g.detach().clone();
  } else {
    slot.add_(g);
  }
}

}  // namespace

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(Tensor& out, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs) {
  if (!needs_grad(inputs)) return;
  node->inputs.clear();
  for (const Tensor& t : inputs)
    node->inputs.push_back(t.defined() && t.requires_grad() ? t : Tensor());
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = std::move(node);
  out.impl()->autograd = std::move(meta);
}

BackwardReport last_backward_report() {
  BackwardReport out;
  out.pass = t_last_report.pass;
  for (const std::weak_ptr<TensorImpl>& leaf : t_last_report.ready)
    if (auto alive = leaf.lock()) out.ready.emplace_back(std::move(alive));
  return out;
}

std::vector<Tensor> unused_parameters(const std::vector<Tensor>& params,
                                      const BackwardReport& report) {
  std::vector<Tensor> unused;
  for (const Tensor& p : params) {
    const auto& meta = p.impl()->autograd;
    if (!meta || meta->ready_pass != report.pass) unused.push_back(p);
  }
  return unused;
}

namespace {

// The engine. Phase 1 walks the graph from the root and counts, for every Node and every leaf,
// how many edges point into it (its pending consumers). Phase 2 runs Nodes whose incoming
// gradients are complete (count reached zero), starting at the root; each finished edge into a
// leaf adds that contribution to the leaf's grad and decrements the leaf's count, and the leaf's
// hooks fire when it reaches zero (Note [Gradient-ready hooks] in autograd.h).
class BackwardPass {
 public:
  BackwardPass() { report_.pass = ++g_pass_counter; }

  // Phase 1.
  void count_consumers(const Tensor& root) {
    std::vector<Node*> stack;
    auto visit_input = [&](const Tensor& t) {
      if (!t.defined()) return;
      AutogradMeta* m = t.impl()->autograd.get();
      if (m->grad_fn) {
        Node* n = m->grad_fn.get();
        if (node_pending_[n]++ == 0) stack.push_back(n);
      } else {
        leaf_pending_[m]++;
      }
    };
    visit_input(root);
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Tensor& in : n->inputs) visit_input(in);
    }
    node_total_ = node_pending_;
  }

  // Phase 2, from `seed`, the gradient of the root.
  void run(const Tensor& root, const Tensor& seed) {
    NoGradGuard no_grad;  // the backward computation itself records nothing
    const std::shared_ptr<Node>& root_fn = root.impl()->autograd->grad_fn;
    if (!root_fn) {
      deliver_to_leaf(root, seed);
      return;
    }
    pending_grad_[root_fn.get()] = seed;
    node_pending_[root_fn.get()] = 0;
    ready_.push_back(root_fn);
    while (!ready_.empty()) {
      std::shared_ptr<Node> node = std::move(ready_.back());
      ready_.pop_back();
      Tensor g = std::move(pending_grad_[node.get()]);
      pending_grad_.erase(node.get());
      std::vector<Tensor> grads;
      if (g.defined()) grads = node->backward(g);
      grads.resize(node->inputs.size());
      for (size_t i = 0; i < node->inputs.size(); ++i) pass_to_input(node->inputs[i], grads[i]);
    }
  }

  const BackwardReport& report() const { return report_; }

 private:
  // One edge of a finished Node: its gradient `g` for `input` (undefined: zero).
  void pass_to_input(const Tensor& input, const Tensor& g) {
    if (!input.defined()) return;
    const auto& meta = input.impl()->autograd;
    if (!meta->grad_fn) {
      deliver_to_leaf(input, g);
      return;
    }
    Node* next = meta->grad_fn.get();
    if (g.defined()) {
      // A Node with a single consumer never sums, so its gradient can alias the producer's
      // buffer; otherwise the first contribution is copied before others are added to it.
      Tensor& slot = pending_grad_[next];
      if (!slot.defined() && node_total_.at(next) == 1) {
        slot = g;
      } else {
        accumulate(slot, g);
      }
    }
    if (--node_pending_[next] == 0) ready_.push_back(meta->grad_fn);
  }

  void deliver_to_leaf(const Tensor& leaf, const Tensor& g) {
    AutogradMeta* m = leaf.impl()->autograd.get();
    if (g.defined()) {
      if (g.shape() != leaf.shape())
        throw Error(Status::Internal("backward: gradient of shape " + shape_to_string(g.shape()) +
                                     " for a leaf of shape " + shape_to_string(leaf.shape())));
      accumulate(m->grad, g);
    }
    if (--leaf_pending_[m] == 0) {
      // A leaf whose every contribution was undefined (zero) still gets a defined gradient, so
      // hooks always see a buffer.
      if (!m->grad.defined()) m->grad = Tensor::zeros(leaf.shape(), leaf.device());
      // Autograd allocated it (a clone of the first contribution), or set_grad gave a view.
      m->grad.set_memory_category(MemoryCategory::kGradients);
      m->ready_pass = report_.pass;
      report_.ready.push_back(leaf);
      // Copy the hook list: a hook may register or remove hooks.
      auto hooks = m->hooks;
      for (auto& [id, hook] : hooks) hook(m->grad);
    }
  }

  BackwardReport report_;
  // Phase 1's counts of consumers not yet finished, which phase 2 counts down.
  std::unordered_map<Node*, int> node_pending_;
  std::unordered_map<AutogradMeta*, int> leaf_pending_;
  std::unordered_map<Node*, int> node_total_;  // phase 1's counts, kept
  // Gradients waiting for their Node to become ready, and the Nodes that are.
  std::unordered_map<Node*, Tensor> pending_grad_;
  std::vector<std::shared_ptr<Node>> ready_;
};

// The gradient of the root that backward starts from: grad_output, or 1 for a scalar root.
Tensor seed_gradient(const Tensor& root, const Tensor& grad_output) {
  if (!root.defined()) fail("backward: root is an undefined tensor");
  if (!root.requires_grad())
    fail("backward: tensor " + root.to_string() +
         " does not require grad (no parameter it depends on has requires_grad set)");
  if (grad_output.defined()) {
    check_same_shape("backward", root, grad_output);
    return grad_output;
  }
  if (root.numel() != 1)
    fail("backward: root of shape " + shape_to_string(root.shape()) +
         " is not a scalar; pass grad_output");
  return Tensor::ones(root.shape(), root.device());
}

}  // namespace

BackwardReport backward(const Tensor& root, const Tensor& grad_output) {
  const Tensor seed = seed_gradient(root, grad_output);
  BackwardPass pass;
  pass.count_consumers(root);
  pass.run(root, seed);
  BackwardReport report = pass.report();
  t_last_report.pass = report.pass;
  t_last_report.ready.assign(report.ready.size(), {});
  for (size_t i = 0; i < report.ready.size(); ++i) t_last_report.ready[i] = report.ready[i].impl();
  return report;
}

}  // namespace kolo::fw
