// Reverse-mode automatic differentiation for kolo::fw tensors.
//
// Every differentiable op (functional.h) that sees an input with requires_grad() records a Node
// on the output: the Node keeps the inputs it needs and knows how to turn the output gradient
// into input gradients. The graph is therefore built on the fly (define-by-run) and freed when
// the last output referencing it goes away.
//
// backward(root) walks the graph in reverse topological order. Gradients ACCUMULATE into each
// leaf's grad() across backward passes until zero_grad(): the first pass allocates the buffer,
// later passes add into the same buffer (so views into it, e.g. a fused flat buffer installed
// with set_grad, stay valid).
//
// Note [Gradient-ready hooks]
// ---------------------------
// DistributedOptimizer overlaps gradient communication with the rest of backward: it must learn
// the moment a parameter's gradient for this pass is final. Before running any Node, backward()
// counts, for every leaf parameter reachable from the root, how many graph edges lead into it
// (its pending consumers in this pass). Each time one consumer's contribution has been added to
// the leaf's grad, the count drops; when it reaches zero the gradient is final and every hook
// registered with Tensor::register_grad_ready_hook fires, exactly once per pass, on the thread
// that called backward(), with the accumulated grad() tensor (which the hook may modify in
// place, e.g. start an in-place allreduce on it). Hooks fire in the order gradients become
// final, which is roughly reverse layer order.
// A parameter that the root does not depend on is never waited for: it gets no hook call in that
// pass and is listed as unused. backward() returns a BackwardReport (which leaves became ready);
// unused_parameters(params, report) gives the complement, and last_backward_report() returns the
// report of the most recent backward() on this thread for code (an optimizer's step) that did not
// call backward() itself.
//
// Thread-safety: one backward() at a time per graph; hooks run synchronously inside backward().
// Errors: backward() of a non-scalar root without grad_output, or of a tensor that does not
// require grad, throws kolo::Error(InvalidArgument).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace kolo::fw {

// A recorded operation. inputs[i] is the i-th differentiable input (undefined when that input
// does not require grad); backward returns one gradient per input (undefined allowed = zero).
class Node {
 public:
  virtual ~Node() = default;
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  virtual const char* name() const = 0;

  std::vector<Tensor> inputs;
};

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  Tensor grad;                    // accumulated gradient (leaves only)
  std::vector<std::pair<int, GradHook>> hooks;
  int next_hook_id = 0;
  uint64_t ready_pass = 0;  // last backward pass in which this leaf's gradient became final
};

// Grad mode: while a NoGradGuard lives on this thread, ops record no graph.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

struct BackwardReport {
  uint64_t pass = 0;          // increasing id of this backward pass (process-wide)
  std::vector<Tensor> ready;  // leaves whose gradient became final, in hook-firing order
};

// Runs backward from root (see the Note above). grad_output defaults to 1 for a one-element root.
BackwardReport backward(const Tensor& root, const Tensor& grad_output = Tensor());

// The report of the latest backward() on this thread (pass 0 and empty before any), with the
// leaves that are still alive: the thread keeps them weakly, so destroying a model releases its
// parameters and gradients at once.
BackwardReport last_backward_report();

// The parameters in params whose gradient did not become ready in the given pass.
std::vector<Tensor> unused_parameters(const std::vector<Tensor>& params,
                                      const BackwardReport& report);

// For op implementations: true when any input requires grad and grad mode is on.
bool needs_grad(const std::vector<Tensor>& inputs);
// For op implementations: attaches node (with its inputs set to those that require grad) to out
// and marks out as requiring grad. Does nothing when !needs_grad(inputs).
void record(Tensor& out, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs);

}  // namespace kolo::fw
