// The allocator's count by category (memory_stats.h): every figure is exact, since the counts
// are of the bytes each tensor asked for. Each test measures differences from its own start, as
// other tests of this binary may leave tensors alive (globals, caches).
#include "framework/memory_stats.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "framework/autograd.h"
#include "framework/functional.h"
#include "framework/nn/layers.h"
#include "framework/tensor.h"

namespace kolo::fw {
namespace {

using C = MemoryCategory;

int64_t now(C c) { return memory_stats().current_of(c); }

TEST(MemoryStats, ATensorIsCountedUnderItsScopeUntilReleased) {
  const int64_t other = now(C::kOther), state = now(C::kOptimizerState);
  {
    Tensor plain = Tensor::empty({10});  // 40 bytes
    MemoryCategoryScope scope(C::kOptimizerState);
    Tensor moments = Tensor::zeros({3, 5});  // 60 bytes
    {
      MemoryCategoryScope inner(C::kCommunication);
      EXPECT_EQ(Tensor::empty({4}, Device::cpu(), DataType::kFloat16).nbytes(), 8u);
    }
    Tensor more = Tensor::empty({1});  // the outer scope again
    EXPECT_EQ(now(C::kOther) - other, 40);
    EXPECT_EQ(now(C::kOptimizerState) - state, 64);
  }
  EXPECT_EQ(now(C::kOther), other);
  EXPECT_EQ(now(C::kOptimizerState), state);
  EXPECT_EQ(memory_category_name(C::kOptimizerState), "optimizer state");
}

TEST(MemoryStats, RetaggingMovesTheBytesOnceForEveryViewAndKeepsPeaks) {
  reset_memory_peaks();
  const MemoryStats before = memory_stats();
  Tensor flat = Tensor::zeros({100});  // 400 bytes, other
  Tensor view = flat.slice(10, 20);
  view.set_memory_category(C::kGradients);  // the storage moves, not the view's 40 bytes
  EXPECT_EQ(now(C::kGradients) - before.current_of(C::kGradients), 400);
  EXPECT_EQ(now(C::kOther) - before.current_of(C::kOther), 0);
  EXPECT_EQ(memory_stats().peak_of(C::kOther) - before.current_of(C::kOther), 400);
  flat.set_memory_category(C::kCommunication);
  flat = Tensor();
  view = Tensor();  // the last handle: released from where it was last counted
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.current_of(C::kCommunication), before.current_of(C::kCommunication));
  EXPECT_EQ(after.peak_of(C::kCommunication) - before.current_of(C::kCommunication), 400);
  EXPECT_EQ(after.total_current, before.total_current);
  EXPECT_EQ(after.total_peak - before.total_current, 400);
  reset_memory_peaks();
  EXPECT_EQ(memory_stats().peak_of(C::kCommunication),
            memory_stats().current_of(C::kCommunication));
}

// The total's peak is of the sum at one time, not the sum of the categories' peaks.
TEST(MemoryStats, TheTotalPeakIsOfTheSumAtOneTime) {
  reset_memory_peaks();
  const int64_t base = memory_stats().total_current;
  { Tensor a = Tensor::empty({256}); }  // 1 KiB, other, freed
  {
    MemoryCategoryScope scope(C::kGradients);
    Tensor b = Tensor::empty({256});  // 1 KiB of gradients, never alongside a
  }
  const MemoryStats s = memory_stats();
  EXPECT_EQ(s.total_peak - base, 1024);
}

TEST(MemoryStats, ParametersAndTheirGradientsAreTaggedByTheStack) {
  const int64_t params = now(C::kParameters), grads = now(C::kGradients);
  Generator gen(1);
  nn::Linear layer(4, 3, true, &gen);  // weight 12 + bias 3 floats
  EXPECT_EQ(now(C::kParameters) - params, 15 * 4);
  Tensor x = Tensor::ones({2, 4});
  sum(layer.forward(x)).backward();
  EXPECT_EQ(now(C::kGradients) - grads, 15 * 4);
  Tensor w = layer.parameters()[0];
  w.set_grad(Tensor::zeros({3, 4}));  // the old gradient is released, the new one counted
  EXPECT_EQ(now(C::kGradients) - grads, 15 * 4);
}

// The thread's last backward report holds its leaves weakly: a model destroyed after its last
// backward releases its parameters and gradients at once, not at the next backward.
TEST(MemoryStats, AModelDestroyedAfterBackwardReleasesItsMemoryAtOnce) {
  const int64_t params = now(C::kParameters), grads = now(C::kGradients);
  {
    Generator gen(2);
    nn::Linear layer(8, 8, true, &gen);
    sum(layer.forward(Tensor::ones({1, 8}))).backward();
    EXPECT_EQ(now(C::kParameters) - params, 72 * 4);
    EXPECT_EQ(last_backward_report().ready.size(), 2u);
  }
  EXPECT_EQ(now(C::kParameters), params);
  EXPECT_EQ(now(C::kGradients), grads);
  EXPECT_TRUE(last_backward_report().ready.empty());
}

// Many threads allocating under different categories leave every count where it was.
TEST(MemoryStats, ConcurrentAllocationsBalance) {
  const MemoryStats before = memory_stats();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      MemoryCategoryScope scope(static_cast<C>(t % kNumMemoryCategories));
      for (int i = 0; i < 2000; ++i) {
        Tensor a = Tensor::empty({i % 17 + 1});
        a.set_memory_category(static_cast<C>((t + i) % kNumMemoryCategories));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.current, before.current);
  EXPECT_EQ(after.total_current, before.total_current);
}

}  // namespace
}  // namespace kolo::fw
