// ShardedOptimizer in one process (no kolo::init: a set of one rank, which owns every shard):
// the layout's arithmetic, the sliced updates against the wrapped optimizer's own step, and the
// argument errors. Multi-rank equality runs through real processes (sharded_training_test.cc).
#include "framework/distributed/sharded_optimizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/distributed/sharded_checkpoint.h"
#include "framework/distributed/sharded_update.h"
#include "framework/functional.h"
#include "framework/memory_stats.h"
#include "framework/optim/adam.h"
#include "framework/optim/lars.h"
#include "framework/optim/sgd.h"

namespace kolo::fw {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ShardLayout, ShardsAreContiguousAndBalancedToOneElement) {
  // Sizes 5, 3, 7 (registration order); bucket_bytes 36 holds 9 floats: {7} then {3, 5}.
  const auto layout = make_shard_layout({5, 3, 7}, 36, 3);
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0].params, (std::vector<size_t>{2}));
  EXPECT_EQ(layout[0].counts, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(layout[1].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(layout[1].param_starts, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(layout[1].counts, (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(layout[1].offsets, (std::vector<int64_t>{0, 3, 6}));
  // Rank 1 owns elements [3, 6) of bucket 1: parameter 0's first three.
  const auto mid = owned_segments(layout[1], 1);
  ASSERT_EQ(mid.size(), 1u);
  EXPECT_EQ(mid[0].param, 0u);
  EXPECT_EQ(mid[0].param_offset, 0);
  EXPECT_EQ(mid[0].bucket_offset, 3);
  EXPECT_EQ(mid[0].length, 3);
  // Rank 2 owns [6, 8): parameter 0's elements 3 and 4.
  const auto last = owned_segments(layout[1], 2);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].param_offset, 3);
  EXPECT_EQ(last[0].length, 2);
  // More ranks than elements: some own nothing.
  const auto tiny = make_shard_layout({2}, 0, 4);
  EXPECT_EQ(tiny[0].counts, (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_TRUE(owned_segments(tiny[0], 3).empty());
}

struct Net {
  Tensor w;
  Tensor b;
  explicit Net(Device device = Device::cpu())
      : w(Tensor::from_vector({0.5f, -0.25f, 1.f, 0.75f, -1.f, 0.1f}, {2, 3}, device)),
        b(Tensor::from_vector({0.2f, -0.3f}, {2}, device)) {
    w.set_requires_grad(true);
    b.set_requires_grad(true);
  }
  void backward(int step) {
    const Tensor x =
        Tensor::from_vector({1.f, 2.f - static_cast<float>(step), 0.5f}, {1, 3}, w.device());
    const Tensor y = linear(x, w, b);
    sum(mul(y, y)).backward();
  }
};

// One rank owns everything, so each step must equal the wrapped optimizer's own, bit for bit.
template <typename Make>
void expect_same_as_plain(Make make, double max_grad_norm = 0) {
  for (ShardStage stage : {ShardStage::kOptimizerState, ShardStage::kGradients}) {
    Net plain, sharded;
    auto plain_opt = make(std::vector<Tensor>{plain.w, plain.b});
    auto inner = make(std::vector<Tensor>{sharded.w, sharded.b});
    ShardedOptions options;
    options.stage = stage;
    options.max_grad_norm = max_grad_norm;
    options.distributed.bucket_bytes = 8;  // two buckets, b then w
    ShardedOptimizer opt(*inner, {{"w", sharded.w}, {"b", sharded.b}}, options);
    for (int step = 0; step < 4; ++step) {
      plain_opt->zero_grad();
      plain.backward(step);
      if (max_grad_norm > 0) {
        const double total = plain.w.grad().sq_norm() + plain.b.grad().sq_norm();
        const float coef = static_cast<float>(clip_coefficient(total, max_grad_norm));
        if (coef < 1.f) {
          plain.w.grad().mul_(coef);
          plain.b.grad().mul_(coef);
        }
      }
      plain_opt->step();
      opt.zero_grad();
      sharded.backward(step);
      opt.step();
      EXPECT_EQ(sharded.w.to_vector(), plain.w.to_vector()) << plain_opt->name() << " " << step;
      EXPECT_EQ(sharded.b.to_vector(), plain.b.to_vector()) << plain_opt->name() << " " << step;
    }
    EXPECT_EQ(inner->step_count(), 4);
    if (stage == ShardStage::kGradients) {
      EXPECT_FALSE(sharded.w.grad().defined());
    }
  }
}

TEST(ShardedOptimizer, OneRankStepsEqualTheWrappedOptimizersOwn) {
  expect_same_as_plain([](std::vector<Tensor> p) {
    return std::make_unique<SGD>(
        p, SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  });
  expect_same_as_plain([](std::vector<Tensor> p) {
    return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01, .weight_decay = 0.01});
  });
  expect_same_as_plain([](std::vector<Tensor> p) {
    return std::make_unique<AdamW>(p, AdamOptions{.lr = 0.01, .weight_decay = 0.1});
  });
  expect_same_as_plain(
      [](std::vector<Tensor> p) {
        return std::make_unique<LARS>(p, LarsOptions{.lr = 0.1, .weight_decay = 0.01});
      },
      /*max_grad_norm=*/0.5);
}

class Unshardable : public Optimizer {
 public:
  explicit Unshardable(std::vector<Tensor> p) : Optimizer("Lion", single_group(p), 0.1, {"m"}) {}
  std::string name() const override { return "Lion"; }

 protected:
  void update(int64_t, Tensor&, const Tensor&, double, double, int64_t) override {}
};

// The deprecated 0.2 form of SliceUpdater::update (raw CPU pointers) gives the tensor form's
// bits, for SGD with momentum and for Adam, over three updates.
TEST(SliceUpdater, TheDeprecatedPointerFormEqualsTheTensorForm) {
  for (const bool adam : {false, true}) {
    Tensor w = Tensor::from_vector({0.5f, -1.f, 2.f, 0.25f, -0.75f}, {5});
    std::unique_ptr<Optimizer> opt;
    if (adam)
      opt = std::make_unique<Adam>(std::vector<Tensor>{w}, AdamOptions{.lr = 0.1});
    else
      opt = std::make_unique<SGD>(std::vector<Tensor>{w}, SgdOptions{.lr = 0.1, .momentum = 0.9});
    const SliceUpdater updater(*opt);
    const size_t slots = updater.slot_names().size();
    Tensor p1 = w.clone(), p2 = w.clone();
    const Tensor g = Tensor::from_vector({0.1f, 0.2f, -0.3f, 0.4f, -0.5f}, {5});
    std::vector<Tensor> s1, s2;
    std::vector<float*> raw;
    for (size_t k = 0; k < slots; ++k) {
      s1.push_back(Tensor::zeros({5}));
      s2.push_back(Tensor::zeros({5}));
      raw.push_back(s2.back().data<float>());
    }
    for (int64_t count = 1; count <= 3; ++count) {
      updater.update(p1, g, s1, 1, 0.1, 0.0, count, {});
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
      updater.update(p2.data<float>(), g.data<float>(), raw, 5, 1, 0.1, 0.0, count, {});
#pragma GCC diagnostic pop
    }
    EXPECT_EQ(p1.to_vector(), p2.to_vector()) << (adam ? "Adam" : "SGD");
    EXPECT_NE(p1.to_vector(), w.to_vector()) << "the updates changed nothing";
  }
}

TEST(ShardedOptimizer, BadInputIsNamed) {
  Net net;
  Unshardable lion({net.w, net.b});
  EXPECT_NE(error_of([&] {
              ShardedOptimizer(lion, {{"w", net.w}, {"b", net.b}});
            }).find("cannot shard the state of optimizer 'Lion'"),
            std::string::npos);
  SGD sgd({net.w, net.b}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_NE(error_of([&] {
              ShardedOptimizer(sgd, {{"w", net.w}});
            }).find("the optimizer holds 2 parameters but 1 are named"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ShardedOptimizer(sgd, {{"w", net.w}, {"b", net.b}}, {.max_grad_norm = -1});
            }).find("max_grad_norm must be finite and >= 0, got -1"),
            std::string::npos);
  // Every parameter must be float32 (checked before anything else about it); the message names
  // the parameter, what was expected and what it is.
  const Tensor half = Tensor::zeros({2}, Device::cpu(), DataType::kFloat16);
  EXPECT_EQ(error_of([&] {
              ShardedOptimizer(sgd, {{"w", net.w}, {"h", half}});
            }),
            "InvalidArgument: ShardedOptimizer: parameter 'h' is " + half.to_string() +
                ": expected float32, got float16 (sharding updates float32 parameters only)");
  const Tensor wide = Tensor::zeros({2}, Device::cpu(), DataType::kFloat64);
  EXPECT_NE(error_of([&] {
              ShardedOptimizer(sgd, {{"w", net.w}, {"d", wide}});
            }).find("parameter 'd' is " + wide.to_string() + ": expected float32, got float64"),
            std::string::npos);
  ShardedOptimizer opt(sgd, {{"w", net.w}, {"b", net.b}});
  net.backward(0);
  EXPECT_NE(error_of([&] { sgd.step(); }).find("released to a ShardedOptimizer"),
            std::string::npos);
}

// As DistributedOptimizer's no_sync(): passes inside the scope only accumulate, step() there
// refuses, and the next pass outside makes the sum final.
TEST(ShardedOptimizer, NoSyncAccumulatesAndStepInsideItRefuses) {
  Net net;
  SGD sgd({net.w, net.b}, {.lr = 0.1});
  ShardedOptimizer opt(sgd, {{"w", net.w}, {"b", net.b}});
  opt.zero_grad();
  const std::vector<float> before = net.w.to_vector();
  {
    ShardedNoSyncScope scope = opt.no_sync();
    net.backward(0);
    EXPECT_NE(error_of([&] { opt.step(); }).find("step() inside no_sync()"), std::string::npos);
    EXPECT_EQ(net.w.to_vector(), before);
  }
  const std::vector<float> first = net.w.grad().to_vector();
  net.backward(0);  // the same pass again: the gradient doubles
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(net.w.grad().to_vector()[i], 2 * first[i]);
  opt.step();
  EXPECT_EQ(opt.stats().submitted_from_hooks, 2);  // w and b, after the synced pass only
  EXPECT_EQ(sgd.step_count(), 1);
}

TEST(ShardedOptimizer, MemoryCountsEachCategory) {
  Net net;
  Adam adam({net.w, net.b}, {.lr = 0.01});
  ShardedOptimizer opt(adam, {{"w", net.w}, {"b", net.b}}, {.stage = ShardStage::kGradients});
  net.backward(0);
  opt.step();
  const ShardMemory m = opt.memory();
  EXPECT_EQ(m.current.parameters, 8 * 4);
  EXPECT_EQ(m.current.optimizer_state, 2 * 8 * 4);  // exp_avg and exp_avg_sq, one rank owns all
  EXPECT_EQ(m.current.gradients, 8 * 4);            // the shard only: .grad() was released
  EXPECT_EQ(m.current.communication, 0);            // the flat buffer went once reduced
  EXPECT_EQ(m.peak.communication, 8 * 4);           // it, once .grad() no longer viewed it
}

// ---- CUDA parameters (skipped without a CUDA device; listed in scripts/gpu-check.sh) ----------

// The parameters of a run, read back to the host.
std::vector<float> values_of(const Net& net) {
  std::vector<float> out = net.w.to_vector();
  for (float v : net.b.to_vector()) out.push_back(v);
  return out;
}

// |a - b| <= tol * (1 + |b|) element by element.
void expect_near(const std::vector<float>& a, const std::vector<float>& b, double tol,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tol * (1.0 + std::fabs(b[i]))) << what << " [" << i << "]";
}

// 4 steps of the sharded optimizer with `stage` on `device` (one rank owns every shard).
template <typename Make>
std::vector<float> sharded_run(Make make, ShardStage stage, double max_grad_norm, Device device) {
  Net net(device);
  auto inner = make(std::vector<Tensor>{net.w, net.b});
  ShardedOptions options;
  options.stage = stage;
  options.max_grad_norm = max_grad_norm;
  options.distributed.bucket_bytes = 8;  // two buckets, b then w
  ShardedOptimizer opt(*inner, {{"w", net.w}, {"b", net.b}}, options);
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    net.backward(step);
    opt.step();
  }
  EXPECT_EQ(inner->step_count(), 4);
  return values_of(net);
}

// The same 4 steps with the wrapped optimizer alone on `device` (clipping by hand first).
template <typename Make>
std::vector<float> plain_run(Make make, double max_grad_norm, Device device) {
  Net net(device);
  auto opt = make(std::vector<Tensor>{net.w, net.b});
  for (int step = 0; step < 4; ++step) {
    opt->zero_grad();
    net.backward(step);
    const double total = net.w.grad().sq_norm() + net.b.grad().sq_norm();
    const float coef = static_cast<float>(clip_coefficient(total, max_grad_norm));
    if (coef < 1.f) {
      net.w.grad().mul_(coef);
      net.b.grad().mul_(coef);
    }
    opt->step();
  }
  return values_of(net);
}

// Stages 1 and 2 on cuda:0 against the unsharded run on cuda:0 (the same CUDA kernels and
// reductions on the same values: equal up to the last bit in practice, asserted to 1e-6) and
// against the sharded CPU run (CPU loops against CUDA kernels: rounding, asserted to 1e-5).
template <typename Make>
void expect_cuda_matches(Make make, double max_grad_norm, const std::string& what) {
  const Device gpu = Device::cuda(0);
  const std::vector<float> plain = plain_run(make, max_grad_norm, gpu);
  for (ShardStage stage : {ShardStage::kOptimizerState, ShardStage::kGradients}) {
    const std::string label = what + " stage " + std::to_string(static_cast<int>(stage));
    const std::vector<float> on_gpu = sharded_run(make, stage, max_grad_norm, gpu);
    expect_near(on_gpu, plain, 1e-6, label + " vs unsharded on cuda:0");
    expect_near(on_gpu, sharded_run(make, stage, max_grad_norm, Device::cpu()), 1e-5,
                label + " vs sharded on the CPU");
  }
}

TEST(ShardedCuda, StagesOneAndTwoOnTheDeviceEqualTheUnshardedAndTheCpuRuns) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  expect_cuda_matches(
      [](std::vector<Tensor> p) {
        return std::make_unique<SGD>(p,
                                     SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
      },
      0, "SGD momentum");
  expect_cuda_matches(
      [](std::vector<Tensor> p) {
        return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01, .weight_decay = 0.01});
      },
      0, "Adam");
  auto lars = [](std::vector<Tensor> p) {
    return std::make_unique<LARS>(p, LarsOptions{.lr = 0.1, .weight_decay = 0.01});
  };
  expect_cuda_matches(lars, 0, "LARS");
  expect_cuda_matches(lars, 0.5, "LARS clipped");  // every step clips at 0.5
  expect_cuda_matches(
      [](std::vector<Tensor> p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01}); }, 0.5,
      "Adam clipped");
}

// Parameters on two devices are refused at construction, naming the parameter and both devices.
TEST(ShardedCuda, ParametersOnTwoDevicesAreNamed) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Net net;
  SGD sgd({net.w, net.b}, {.lr = 0.1});
  const Tensor on_gpu = Tensor::zeros({2}, Device::cuda(0));
  EXPECT_EQ(error_of([&] {
              ShardedOptimizer(sgd, {{"w", net.w}, {"g", on_gpu}});
            }),
            "InvalidArgument: ShardedOptimizer: parameter 'g' is on cuda:0, expected cpu (the "
            "device of parameter 'w'): every parameter must be on one device (each bucket is one "
            "flat buffer there)");
}

TEST(ShardedCuda, DeviceBuffersAreCountedUnderCuda) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Net net(Device::cuda(0));
  Adam adam({net.w, net.b}, {.lr = 0.01});
  const MemoryStats cuda_before = memory_stats(DeviceKind::kCuda);
  const MemoryStats cpu_before = memory_stats(DeviceKind::kCpu);
  ShardedOptimizer opt(adam, {{"w", net.w}, {"b", net.b}}, {.stage = ShardStage::kGradients});
  opt.zero_grad();
  net.backward(0);
  opt.step();
  const MemoryStats cuda = memory_stats(DeviceKind::kCuda);
  const MemoryStats cpu = memory_stats(DeviceKind::kCpu);
  // exp_avg and exp_avg_sq slices (8 floats each) and the reduced shard (8 floats), on the GPU.
  EXPECT_EQ(cuda.current_of(MemoryCategory::kOptimizerState) -
                cuda_before.current_of(MemoryCategory::kOptimizerState),
            2 * 8 * 4);
  EXPECT_EQ(cuda.current_of(MemoryCategory::kGradients) -
                cuda_before.current_of(MemoryCategory::kGradients),
            8 * 4);
  EXPECT_EQ(cpu.current_of(MemoryCategory::kOptimizerState),
            cpu_before.current_of(MemoryCategory::kOptimizerState));
  const ShardMemory m = opt.memory();
  EXPECT_EQ(m.current.parameters, 8 * 4);
  EXPECT_EQ(m.current.optimizer_state, 2 * 8 * 4);
  EXPECT_EQ(m.current.gradients, 8 * 4);
}

// A sharded checkpoint of a CUDA run goes through the host: saved after 2 steps, loaded into a
// CUDA run and into a CPU run, each continues 2 steps and ends where the saving run ends.
TEST(ShardedCuda, ACheckpointOfACudaRunLoadsOnTheDeviceAndOnTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string path = ::testing::TempDir() + "zero_cuda_ckpt_" + std::to_string(getpid());
  auto run = [&](Device device, int from, int to, bool save, bool load) {
    Net net(device);
    Adam adam({net.w, net.b}, {.lr = 0.01});
    ShardedOptimizer opt(adam, {{"w", net.w}, {"b", net.b}}, {.stage = ShardStage::kGradients});
    const NamedTensors model = {{"w", net.w}, {"b", net.b}};
    if (load) load_sharded_checkpoint(path, 1, model, opt);
    for (int step = from; step < to; ++step) {
      opt.zero_grad();
      net.backward(step);
      opt.step();
      if (save && step == 1) save_sharded_checkpoint(path, model, opt);
    }
    return values_of(net);
  };
  const std::vector<float> whole = run(Device::cuda(0), 0, 4, /*save=*/true, /*load=*/false);
  expect_near(run(Device::cuda(0), 2, 4, false, true), whole, 0, "resumed on cuda:0");
  expect_near(run(Device::cpu(), 2, 4, false, true), whole, 1e-5, "resumed on the CPU");
  std::remove(shard_file(path, 0, 1).c_str());
}

}  // namespace
}  // namespace kolo::fw
