// Two data-parallel groups in one job, through process sets (kolo/process_set.h).
//
// 4 ranks form 2 groups of 2 ({0, 1} and {2, 3}). Each group trains its own replica of a
// small MLP (its own initial weights) on its own data: a DistributedOptimizer over the group's
// process set averages gradients between the group's two ranks only, so the two groups train
// independently and at the same time. At the end the two replicas are averaged through the
// global set, as an ensemble or a "model soup" would be.
//
// The program checks what it claims and exits 1 otherwise: each group's loss decreases; the
// two ranks of a group hold identical parameters while the two groups' differ; after the
// global average every rank holds the same parameters, the mean of the two replicas.
//
//   kolorun -np 4 build/bin/process_sets [--steps 30]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/distributed/distributed_optimizer.h"
#include "framework/functional.h"
#include "framework/optim/sgd.h"
#include "kolo/kolo.h"

namespace fw = kolo::fw;

namespace {

constexpr int kFeatures = 8, kHidden = 16, kBatch = 16;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "process_sets: rank %d: %s\n", kolo::rank(), what.c_str());
  std::exit(1);
}

void check(const kolo::Status& status, const char* what) {
  if (!status.ok()) fail(std::string(what) + ": " + status.to_string());
}

struct Model {
  fw::Tensor w1, b1, w2, b2;
  std::vector<std::pair<std::string, fw::Tensor>> named() const {
    return {{"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}};
  }
  fw::Tensor forward(const fw::Tensor& x) const {
    return fw::linear(fw::relu(fw::linear(x, w1, b1)), w2, b2);
  }
};

Model make_model(uint64_t seed) {
  fw::Generator gen(seed);
  Model m{fw::Tensor::randn({kHidden, kFeatures}, 0.f, 0.3f, &gen), fw::Tensor::zeros({kHidden}),
          fw::Tensor::randn({1, kHidden}, 0.f, 0.3f, &gen), fw::Tensor::zeros({1})};
  for (auto* t : {&m.w1, &m.b1, &m.w2, &m.b2}) t->set_requires_grad(true);
  return m;
}

// A regression target every rank shares; each rank draws its own samples of it.
void batch(fw::Generator& gen, fw::Tensor* x, fw::Tensor* y) {
  *x = fw::Tensor::randn({kBatch, kFeatures}, 0.f, 1.f, &gen);
  std::vector<float> xs = x->to_vector(), ys(kBatch);
  for (int i = 0; i < kBatch; ++i)
    for (int j = 0; j < kFeatures; ++j) ys[i] += (j % 2 ? 0.5f : -0.25f) * xs[i * kFeatures + j];
  *y = fw::Tensor::from_vector(ys, {kBatch, 1});
}

std::vector<float> flatten(const Model& m) {
  std::vector<float> all;
  for (const auto& [name, t] : m.named()) {
    std::vector<float> v = t.to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// Whether `v` is identical on every rank of `set`: its max and min over the set agree.
bool same_on(const kolo::ProcessSet& set, const std::vector<float>& v, const std::string& name) {
  std::vector<float> hi = v, lo = v;
  const auto n = static_cast<int64_t>(v.size());
  check(kolo::allreduce(name + ".max", kolo::view_of(hi.data(), {n}),
                        {.reduction = {.op = kolo::ReduceOp::kMax}, .process_set = set}),
        "max");
  check(kolo::allreduce(name + ".min", kolo::view_of(lo.data(), {n}),
                        {.reduction = {.op = kolo::ReduceOp::kMin}, .process_set = set}),
        "min");
  return hi == lo;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 30;
  if (argc == 3 && std::string(argv[1]) == "--steps") steps = std::atoi(argv[2]);
  if (steps <= 0) fail("usage: process_sets [--steps N>0]");
  check(kolo::init(), "init");
  const int rank = kolo::rank();
  if (kolo::size() != 4) fail("run with 4 ranks: kolorun -np 4 process_sets");
  const int group = rank / 2;
  // Collective over the job: every rank adds both groups, in the same order.
  kolo::Result<kolo::ProcessSet> g0 = kolo::add_process_set({0, 1});
  check(g0.status(), "add_process_set");
  kolo::Result<kolo::ProcessSet> g1 = kolo::add_process_set({2, 3});
  check(g1.status(), "add_process_set");
  const kolo::ProcessSet mine = group == 0 ? *g0 : *g1;

  Model model = make_model(/*seed=*/100 + group);  // one replica per group
  std::vector<fw::Tensor> params;
  for (auto& [name, t] : model.named()) params.push_back(t);
  fw::SGD sgd(params, {.lr = 0.05});
  fw::DistributedOptimizer opt(sgd, model.named(), {.process_set = mine});
  fw::Generator data(1000 + rank);
  float first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    fw::Tensor x, y;
    batch(data, &x, &y);
    opt.zero_grad();
    fw::Tensor loss = fw::mse_loss(model.forward(x), y);
    loss.backward();
    opt.step();
    // The group's mean loss (over its own process set).
    float l = loss.item();
    check(kolo::allreduce("loss", kolo::view_of(&l, {}),
                          {.reduction = {.op = kolo::ReduceOp::kAverage}, .process_set = mine}),
          "loss");
    if (step == 0) first = l;
    last = l;
  }
  std::printf("rank %d (group %d, set rank %d): loss %.4f -> %.4f\n", rank, group, mine.rank(),
              first, last);
  if (!(last < first)) fail("the group's loss did not decrease");

  std::vector<float> p = flatten(model);
  if (!same_on(mine, p, "replica")) fail("the ranks of a group hold different parameters");
  if (same_on(kolo::global_process_set(), p, "before"))
    fail("the two groups' replicas are identical: they did not train independently");
  // Average the two replicas over every rank.
  std::vector<float> avg = p;
  check(kolo::allreduce("average", kolo::view_of(avg.data(), {static_cast<int64_t>(avg.size())}),
                        {.reduction = {.op = kolo::ReduceOp::kAverage}}),
        "average");
  if (!same_on(kolo::global_process_set(), avg, "after"))
    fail("the averaged parameters differ between ranks");
  // Each element is the mean of the two replicas: (p_group0 + p_group1) / 2.
  // Every rank's replica (rows in rank order): ranks 0 and 2 hold one of each group's.
  const auto n = static_cast<int64_t>(p.size());
  kolo::Result<kolo::HostTensor> all = kolo::allgather("replicas", kolo::view_of(p.data(), {1, n}));
  check(all.status(), "allgather");
  const float* other = all->data_as<float>() + (group == 0 ? 2 : 0) * n;
  double worst = 0;
  for (size_t i = 0; i < p.size(); ++i)
    worst = std::max(worst, std::fabs(avg[i] - 0.5 * (p[i] + other[i])));
  if (worst > 1e-6) fail("the average is off by " + std::to_string(worst));
  double sum = 0;
  for (float v : avg) sum += v;
  std::printf("rank %d: averaged parameters: %zu values, sum %.6f\n", rank, avg.size(), sum);
  check(kolo::shutdown(), "shutdown");
  if (rank == 0) std::printf("process_sets: ok\n");
  return 0;
}
