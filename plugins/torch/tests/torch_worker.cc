// One rank of the C++ plugin's tests (torch_test.cc runs it under kolorun). Modes:
//   exact [--compression fp16] [--passes k]: P ranks with uneven local batches train an MLP
//       with SGD + momentum; prints the largest difference from one process (in this same
//       process) on the union of the batches.
//   overlap: the first layer's gradient hook sees the last layer's allreduce submitted and
//       completed: communication runs during backward.
//   collectives: every collective and dtype against closed forms; broadcasts of parameters and
//       optimizer state; the sampler; refusal of unsupported dtypes.
//   syncbn: SyncBatchNorm2d on uneven local batches equals BatchNorm2d on their union (output,
//       input gradient, summed parameter gradients, running statistics).
//   mismatch: ranks allreduce different shapes under one name; prints each rank's error.
//   zero: ShardedOptimizer (SGD + momentum, Adam; both shards), uneven batches, 15 steps,
//       equals the unsharded DistributedOptimizer; state only for this rank's parameters; stage
//       2 drops the other ranks' gradients; LBFGS refused naming it.
// Prints "[ok] <mode>" at the end when every check held, "FAIL ..." lines otherwise.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "kolo/torch.h"
#include "kolo/torch_sync_batch_norm.h"
#include "kolo/torch_zero.h"

namespace kt = kolo::torch;
namespace nn = torch::nn;

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

nn::Sequential make_mlp(uint64_t seed) {
  torch::manual_seed(seed);
  return nn::Sequential(nn::Linear(6, 16), nn::ReLU(), nn::Linear(16, 8), nn::ReLU(),
                        nn::Linear(8, 3));
}

// Global batch of step s and the rows [begin, end) of rank r when the rows split unevenly:
// rank r gets r + 2 rows (2, 3, 4, ...) out of the total.
std::pair<int64_t, int64_t> rows_of(int r) {
  int64_t begin = 0;
  for (int q = 0; q < r; ++q) begin += q + 2;
  return {begin, begin + r + 2};
}

int mode_exact(int passes, kt::Compression compression) {
  const int P = kt::size(), r = kt::rank();
  const int64_t total = rows_of(P - 1).second;
  nn::Sequential model = make_mlp(100 + r);  // different on every rank until the broadcast
  kt::broadcast_parameters(*model);
  nn::Sequential reference = make_mlp(100);  // rank 0's initial weights
  torch::optim::SGD inner(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  kt::DistributedOptions options;
  options.backward_passes_per_step = passes;
  options.compression = compression;
  options.bucket_bytes = 512;  // several buckets
  kt::DistributedOptimizer opt(inner, model->named_parameters(), options);
  torch::manual_seed(7);
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    ref_opt.zero_grad();
    for (int pass = 0; pass < passes; ++pass) {
      const torch::Tensor x = torch::randn({total, 6});
      const torch::Tensor y = torch::randint(0, 3, {total});
      const auto [b, e] = rows_of(r);
      opt.set_local_batch_size(e - b);
      torch::nn::functional::cross_entropy(model->forward(x.slice(0, b, e)), y.slice(0, b, e))
          .backward();
      // One process on the union: the mean over the passes of the whole batch's mean loss.
      (torch::nn::functional::cross_entropy(reference->forward(x), y) / passes).backward();
    }
    opt.step();
    ref_opt.step();
  }
  double diff = 0;
  auto ps = model->parameters();
  auto qs = reference->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    diff = std::max(diff, (ps[i] - qs[i]).abs().max().item<double>());
  }
  std::printf("max_diff %.3g buckets %zu hooks %lld\n", diff, opt.bucket_names().size(),
              static_cast<long long>(opt.stats().submitted_from_hooks));
  const double tolerance = compression == kt::Compression::kNone ? 1e-5 : 2e-2;
  expect(diff < tolerance, "parameters differ from one process by " + std::to_string(diff));
  expect(opt.stats().submitted_at_step == 0, "every bucket was submitted from a hook");
  // Note [Buckets]: fewer allreduces than gradients, one per bucket and step.
  const auto buckets = static_cast<int64_t>(opt.bucket_names().size());
  expect(buckets > 1 && buckets < static_cast<int64_t>(ps.size()) &&
             opt.stats().allreduces == 4 * buckets,
         "allreduces " + std::to_string(opt.stats().allreduces) + " for " +
             std::to_string(buckets) + " buckets of " + std::to_string(ps.size()) + " gradients");
  return 0;
}

int mode_overlap() {
  nn::Sequential model = make_mlp(3);
  torch::optim::SGD inner(model->parameters(), torch::optim::SGDOptions(0.1));
  kt::DistributedOptions options;
  options.bucket_bytes = 0;  // one bucket per parameter
  kt::DistributedOptimizer opt(inner, model->named_parameters(), options);
  // The first layer's weight gets its gradient last: its tensor hook runs at the end of
  // backward, when the output layer's allreduce was submitted long before.
  size_t submitted = 0;
  bool completed = false;
  auto first = model->named_parameters()["0.weight"];
  first.register_hook([&](torch::Tensor g) {
    std::vector<kt::Handle> hs = opt.submitted_handles();
    submitted = hs.size();
    completed = !hs.empty() && hs[0].raw().wait(std::chrono::seconds(30)).ok();
    return g;
  });
  torch::Tensor x = torch::randn({4, 6});
  model->forward(x).sum().backward();
  opt.step();
  std::printf("overlap submitted_during_backward %zu first_completed_during_backward %d\n",
              submitted, completed ? 1 : 0);
  expect(submitted >= 2, "allreduces submitted before backward reached the first layer");
  expect(completed, "the output layer's allreduce completed during backward");
  return 0;
}

void check_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  const bool ok = got.sizes() == want.sizes() && got.scalar_type() == want.scalar_type() &&
                  torch::allclose(got.to(torch::kDouble), want.to(torch::kDouble), 1e-5, 1e-5);
  if (!ok) {
    std::ostringstream s;
    s << what << ": got " << got << " want " << want;
    expect(false, s.str());
  }
}

int mode_collectives() {
  const int P = kt::size(), r = kt::rank();
  const double sum_ranks = P * (P + 1) / 2.0;  // sum of (rank + 1)
  for (auto type : {torch::kUInt8, torch::kInt8, torch::kInt32, torch::kInt64, torch::kHalf,
                    torch::kBFloat16, torch::kFloat, torch::kDouble}) {
    const std::string t = c10::toString(type);
    const auto opts = torch::TensorOptions().dtype(type);
    // In place and out of place, sum, min, max.
    torch::Tensor a = torch::full({2, 3}, r + 1, opts);
    kt::allreduce_("ar." + t, a);
    check_close(a, torch::full({2, 3}, sum_ranks, opts), "allreduce_ sum " + t);
    torch::Tensor in = torch::full({3}, r + 1, opts);
    torch::Tensor out =
        kt::allreduce("ar_oop." + t, in, {.reduction = {.op = kolo::ReduceOp::kMax}});
    check_close(out, torch::full({3}, P, opts), "allreduce max " + t);
    check_close(in, torch::full({3}, r + 1, opts), "allreduce input unchanged " + t);
    // Allgather with uneven first dimensions: rank q gives q + 1 rows of value q.
    torch::Tensor g = kt::allgather("ag." + t, torch::full({r + 1, 2}, r, opts));
    std::vector<torch::Tensor> parts;
    for (int q = 0; q < P; ++q) parts.push_back(torch::full({q + 1, 2}, q, opts));
    check_close(g, torch::cat(parts), "allgather " + t);
    // Broadcast from the last rank.
    torch::Tensor b = torch::full({4}, r, opts);
    kt::broadcast_("bc." + t, b, P - 1);
    check_close(b, torch::full({4}, P - 1, opts), "broadcast " + t);
  }
  // Average, a non-contiguous tensor in place, a grouped allreduce.
  torch::Tensor nc = torch::arange(6, torch::kFloat).reshape({2, 3}).t() * (r + 1);
  kt::allreduce_("ar.noncontig", nc, {.reduction = {.op = kolo::ReduceOp::kAverage}});
  check_close(nc, torch::arange(6, torch::kFloat).reshape({2, 3}).t() * (sum_ranks / P),
              "allreduce_ average non-contiguous");
  std::vector<torch::Tensor> group = {torch::full({2}, r + 1.0), torch::full({3}, 2.0 * r)};
  kt::grouped_allreduce_async_("grouped", group).wait();
  check_close(group[0], torch::full({2}, sum_ranks), "grouped[0]");
  check_close(group[1], torch::full({3}, 2.0 * (sum_ranks - P)), "grouped[1]");
  // Alltoall: rank r sends j + 1 rows of value 10 r + j to rank j.
  std::vector<int64_t> splits;
  std::vector<torch::Tensor> send;
  for (int j = 0; j < P; ++j) {
    splits.push_back(j + 1);
    send.push_back(torch::full({j + 1, 2}, 10.0 * r + j));
  }
  kt::Handle h = kt::alltoall_async("a2a", torch::cat(send), splits);
  torch::Tensor recv = h.wait_one();
  std::vector<torch::Tensor> want;
  for (int q = 0; q < P; ++q) want.push_back(torch::full({r + 1, 2}, 10.0 * q + r));
  check_close(recv, torch::cat(want), "alltoall");
  expect(h.received_splits() == std::vector<int64_t>(P, r + 1), "alltoall received splits");
  // Reducescatter of P + 1 rows: rank 0 gets two rows.
  torch::Tensor rs = kt::reducescatter_async("rs", torch::full({P + 1, 2}, r + 1.0)).wait_one();
  check_close(rs, torch::full({r == 0 ? 2 : 1, 2}, sum_ranks), "reducescatter");
  // Optimizer state: rank 0 steps alone (momentum buffer = its gradient, 1), others not.
  torch::Tensor w = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.1).momentum(0.9));
  if (r == 0) {
    w.mutable_grad() = torch::ones({2});
    sgd.step();
  }
  kt::broadcast_optimizer_state(sgd);
  auto& state = sgd.state();
  expect(state.size() == 1, "optimizer state has one entry on rank " + std::to_string(r));
  if (state.size() == 1) {
    auto& s = static_cast<torch::optim::SGDParamState&>(*state.begin()->second);
    check_close(s.momentum_buffer(), torch::ones({2}), "broadcast momentum buffer");
  }
  // The sampler: the ranks' indices cover the dataset.
  auto sampler = kt::make_sequential_sampler(10);
  auto idx = sampler->next(100).value();
  torch::Tensor mine = torch::tensor(std::vector<int64_t>(idx.begin(), idx.end()));
  torch::Tensor all = kt::allgather("sampler", mine);
  std::set<int64_t> seen(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
  expect(seen.size() == 10 && *seen.begin() == 0 && *seen.rbegin() == 9, "sampler coverage");
  // Refused dtypes name the tensor and the dtype.
  try {
    kt::allreduce_("flags", torch::zeros({2}, torch::kBool));
    expect(false, "bool allreduce did not throw");
  } catch (const kt::Error& e) {
    std::printf("refused: %s\n", e.what());
  }
  return 0;
}

int mode_syncbn() {
  const int P = kt::size(), r = kt::rank();
  const int64_t total = rows_of(P - 1).second;
  const auto [b, e] = rows_of(r);
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({total, 3, 4, 4}) * 2 + 1;
  const torch::Tensor w = torch::randn({total, 3, 4, 4});  // loss = sum(y * w)
  nn::BatchNorm2d reference(3);
  kt::SyncBatchNorm2d sync(3);
  torch::Tensor xr = x.clone().requires_grad_(true);
  torch::Tensor xs = x.slice(0, b, e).clone().requires_grad_(true);
  for (int step = 0; step < 2; ++step) {  // twice: running statistics accumulate
    xr.mutable_grad() = torch::Tensor();
    xs.mutable_grad() = torch::Tensor();
    torch::Tensor yr = reference->forward(xr);
    torch::Tensor ys = sync->forward(xs);
    check_close(ys, yr.slice(0, b, e).detach(), "syncbn output");
    (yr * w).sum().backward();
    (ys * w.slice(0, b, e)).sum().backward();
    check_close(xs.grad(), xr.grad().slice(0, b, e), "syncbn input gradient");
  }
  check_close(kt::allreduce("syncbn.dw", sync->weight.grad()), reference->weight.grad(),
              "syncbn weight gradient summed over ranks");
  check_close(sync->running_mean, reference->running_mean, "syncbn running mean");
  check_close(sync->running_var, reference->running_var, "syncbn running var");
  sync->eval();
  reference->eval();
  check_close(sync->forward(x), reference->forward(x), "syncbn eval");
  return 0;
}

int mode_mismatch() {
  torch::Tensor t = torch::ones({kt::rank() + 2});
  try {
    kt::allreduce_("layer3.weight.grad", t);
    expect(false, "mismatched allreduce succeeded");
  } catch (const kt::Error& e) {
    std::printf("error: %s\n", e.what());
  }
  return 0;
}

template <typename Opt, typename Options>
void zero_case(const char* what, Options opts, kt::Shard shard) {
  const int P = kt::size(), r = kt::rank();
  const int64_t total = rows_of(P - 1).second;
  nn::Sequential plain = make_mlp(100), sharded = make_mlp(100);
  Opt inner_plain(plain->parameters(), opts), inner_sharded(sharded->parameters(), opts);
  kt::DistributedOptimizer o1(inner_plain, plain->named_parameters());
  kt::ShardedOptimizer o2(inner_sharded, sharded->named_parameters(), shard);
  for (int which = 0; which < 2; ++which) {
    torch::manual_seed(7);
    nn::Sequential& m = which == 0 ? plain : sharded;
    for (int step = 0; step < 15; ++step) {
      const torch::Tensor x = torch::randn({total, 6});
      const torch::Tensor y = torch::randint(0, 3, {total});
      const auto [b, e] = rows_of(r);
      if (which == 0) {
        o1.zero_grad();
        o1.set_local_batch_size(e - b);
      } else {
        o2.zero_grad();
        o2.set_local_batch_size(e - b);
      }
      torch::nn::functional::cross_entropy(m->forward(x.slice(0, b, e)), y.slice(0, b, e))
          .backward();
      which == 0 ? o1.step() : o2.step();
    }
  }
  double diff = 0;
  auto ps = plain->parameters();
  auto qs = sharded->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    diff = std::max(diff, (ps[i] - qs[i]).abs().max().item<double>());
  }
  size_t mine = 0, stray = 0;
  for (size_t i = 0; i < o2.owner().size(); ++i) {
    if (o2.owner()[i] == r) ++mine;
    if (o2.owner()[i] != r && o2.parameters()[i].grad().defined()) ++stray;
  }
  std::printf("zero %s shard %d max_diff %.3g state %zu of %zu\n", what, static_cast<int>(shard),
              diff, inner_sharded.state().size(), inner_plain.state().size());
  expect(diff <= 1e-6, std::string(what) + ": parameters differ by " + std::to_string(diff));
  expect(inner_sharded.state().size() == mine && inner_plain.state().size() == ps.size(),
         std::string(what) + ": state for " + std::to_string(inner_sharded.state().size()) +
             " parameters, this rank owns " + std::to_string(mine));
  expect(shard == kt::Shard::kOptimizerState || stray == 0,
         std::string(what) + ": stage 2 kept " + std::to_string(stray) + " gradients");
}

int mode_zero() {
  for (kt::Shard shard : {kt::Shard::kOptimizerState, kt::Shard::kGradients}) {
    zero_case<torch::optim::SGD>("sgd", torch::optim::SGDOptions(0.05).momentum(0.9), shard);
    zero_case<torch::optim::Adam>("adam", torch::optim::AdamOptions(1e-2), shard);
    zero_case<torch::optim::AdamW>("adamw", torch::optim::AdamWOptions(1e-2), shard);
  }
  nn::Sequential m = make_mlp(1);
  torch::optim::LBFGS lbfgs(m->parameters(), torch::optim::LBFGSOptions(1));
  try {
    kt::ShardedOptimizer bad(lbfgs, m->named_parameters());
    expect(false, "LBFGS was sharded");
  } catch (const kt::Error& e) {
    expect(std::string(e.what()).find("LBFGS") != std::string::npos,
           std::string("the LBFGS error does not name it: ") + e.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  int passes = 1;
  kt::Compression compression = kt::Compression::kNone;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--passes") == 0) passes = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--compression") == 0 && std::strcmp(argv[i + 1], "fp16") == 0) {
      compression = kt::Compression::kFloat16;
    }
  }
  torch::set_num_threads(1);
  try {
    kt::init();
    if (mode == "exact") {
      mode_exact(passes, compression);
    } else if (mode == "overlap") {
      mode_overlap();
    } else if (mode == "collectives") {
      mode_collectives();
    } else if (mode == "syncbn") {
      mode_syncbn();
    } else if (mode == "mismatch") {
      mode_mismatch();
    } else if (mode == "zero") {
      mode_zero();
    } else {
      std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
      return 2;
    }
    kt::shutdown();
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  if (failures == 0) std::printf("[ok] %s\n", mode.c_str());
  return failures == 0 ? 0 : 1;
}
