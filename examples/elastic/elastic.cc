// The elastic loop in the fewest lines (docs/elastic.md): a linear model fitted to synthetic
// data that goes on when a rank is lost or added.
//
//   kolorun -np 3 --min-np 2 build/bin/elastic_example
//
// One kolo::elastic::State holds what a rank needs to continue (the weights, the optimizer's
// state, the step and the sampler's position); it is committed every few steps, and
// kolo::elastic::run() calls the loop again from the last commit on a re-formed world, after
// the on_reset callback has given the sampler and the optimizer the new world.
#include "kolo/elastic.h"

#include <cstdio>
#include <vector>

#include "framework/distributed/elastic_sampler.h"
#include "kolo/framework.h"

namespace fw = kolo::fw;

kolo::Status train() {
  // y = sum of the features - 1: every rank makes the same data set.
  constexpr int64_t kSamples = 4096, kFeatures = 8, kBatch = 32, kSteps = 200;
  fw::Generator gen(7);
  std::vector<float> xs(kSamples * kFeatures), ys(kSamples, -1.f);
  for (int64_t i = 0; i < kSamples * kFeatures; ++i) ys[i / kFeatures] += xs[i] = gen.next_normal();

  fw::Generator init(1);
  fw::nn::Linear model(kFeatures, 1, true, &init);
  fw::SGD sgd(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  fw::DistributedOptimizer opt(sgd, model.named_parameters());
  fw::ElasticSampler sampler({.size = kSamples, .batch_size = kBatch}, kolo::rank(), kolo::size());

  kolo::elastic::State state;
  int64_t step = 0;
  for (auto& [name, t] : model.named_parameters())
    KOLO_RETURN_IF_ERROR(state.add_tensor(name, fw::view_of_tensor(t)));
  for (auto& [name, t] : sgd.state_tensors())
    KOLO_RETURN_IF_ERROR(state.add_tensor("optim." + name, fw::view_of_tensor(*t)));
  KOLO_RETURN_IF_ERROR(state.add_counter("step", &step));
  KOLO_RETURN_IF_ERROR(sampler.add_to(state));
  state.on_reset([&] {  // after a re-form: the new world's rank and size
    sampler.set_world(kolo::rank(), kolo::size());
    opt.reset_for_new_world();
    return kolo::Status::Ok();
  });

  float last_loss = 0;
  KOLO_RETURN_IF_ERROR(kolo::elastic::run(state, [&]() -> kolo::Status {
    try {
      while (step < kSteps) {
        std::vector<float> x, y;
        for (int64_t i : sampler.next_local()) {
          x.insert(x.end(), &xs[i * kFeatures], &xs[(i + 1) * kFeatures]);
          y.push_back(ys[i]);
        }
        const auto n = static_cast<int64_t>(y.size());
        opt.zero_grad();
        opt.set_local_batch_size(n);  // exact averaging when ranks hold different counts
        if (n > 0) {
          const fw::Tensor pred = model.forward(fw::Tensor::from_vector(x, {n, kFeatures}));
          const fw::Tensor loss = fw::mse_loss(pred, fw::Tensor::from_vector(y, {n, 1}));
          loss.backward();
          last_loss = loss.item();
        }
        opt.step();  // a lost peer makes it throw
        sampler.advance();
        if (++step % 5 == 0) KOLO_RETURN_IF_ERROR(state.commit());
      }
      return kolo::Status::Ok();
    } catch (const kolo::Error& e) {  // run() re-forms the world when it is a lost peer
      return e.status();
    }
  }));
  if (kolo::rank() == 0)
    std::printf("%d rank(s), %lld steps, last loss %.2e\n", kolo::size(),
                static_cast<long long>(step), last_loss);
  return kolo::Status::Ok();
}

int main() {
  kolo::Status status = kolo::init();
  if (status.ok()) status = train();
  if (!status.ok()) std::fprintf(stderr, "elastic_example: %s\n", status.to_string().c_str());
  (void)kolo::shutdown();
  return status.ok() ? 0 : 1;
}
