// A program written against Kolo 0.2's public API, in the spellings its users wrote: backends
// named by BackendKind, allreduce options in the flat spelling (.op, .prescale, .postscale).
// kolo.h keeps them for one release (deprecated in 0.3, removed in 0.4); this target compiles
// with their warnings silenced (coordinator/CMakeLists.txt) and checks that they give the new
// spellings' answers. It goes with them in 0.4.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "coordinator/test_cluster.h"
#include "kolo/kolo.h"

namespace kolo::coord {
namespace {

TEST(DeprecatedApiTest, BackendKindAnswersAsTheBackendsName) {
  const std::pair<BackendKind, std::string> kinds[] = {{BackendKind::kTcp, "tcp"},
                                                       {BackendKind::kShm, "shm"},
                                                       {BackendKind::kMpi, "mpi"},
                                                       {BackendKind::kNccl, "nccl"}};
  for (const auto& [kind, name] : kinds) {
    EXPECT_EQ(backend_kind_name(kind), name);
    EXPECT_EQ(built(kind), built(name)) << name;
  }
  EXPECT_TRUE(built(BackendKind::kTcp));
  EXPECT_EQ(built(BackendKind::kMpi), static_cast<bool>(KOLO_TEST_BUILT_MPI));
  EXPECT_EQ(built(BackendKind::kNccl), static_cast<bool>(KOLO_TEST_BUILT_NCCL));
}

TEST(DeprecatedApiTest, FlatMembersReadAndWriteAsIn02) {
  AllreduceOptions opts{.op = ReduceOp::kAverage, .process_set = ProcessSet{}};
  opts.prescale = 0.5;
  EXPECT_TRUE(opts.op == ReduceOp::kAverage);
  EXPECT_EQ(reduce_op_name(opts.op), "average");
  const double prescale = opts.prescale, postscale = opts.postscale;
  EXPECT_EQ(prescale, 0.5);
  EXPECT_EQ(postscale, 1.0);
  EXPECT_EQ(opts.prescale * 4, 2.0);
  EXPECT_EQ(opts.reduction, Reduction{});  // the new member is left alone
  Result<Reduction> r = effective_reduction(opts);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, (Reduction{ReduceOp::kAverage, 0.5, 1.0}));
}

// effective_reduction's value; a failure is reported and gives an invalid op, which no expected
// reduction equals.
Reduction resolved(const AllreduceOptions& opts) {
  Result<Reduction> r = effective_reduction(opts);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : Reduction{static_cast<ReduceOp>(kNumReduceOps)};
}

TEST(DeprecatedApiTest, EffectiveReductionTakesTheSpellingInUse) {
  EXPECT_EQ(resolved({}), Reduction{});
  EXPECT_EQ(resolved({.reduction = {.op = ReduceOp::kMax, .postscale = 2.0}}),
            (Reduction{ReduceOp::kMax, 1.0, 2.0}));
  EXPECT_EQ(resolved({.postscale = 3.0}), (Reduction{ReduceOp::kSum, 1.0, 3.0}));
  // Both spellings, saying the same: no conflict.
  const AllreduceOptions same{
      .reduction = {.op = ReduceOp::kMin, .prescale = 3.0}, .op = ReduceOp::kMin, .prescale = 3.0};
  EXPECT_EQ(resolved(same), (Reduction{ReduceOp::kMin, 3.0, 1.0}));
}

constexpr char kConflict[] =
    "allreduce 'x': AllreduceOptions sets the reduction twice, differently: .reduction is {op max, "
    "prescale 1, postscale 1} but the deprecated flat members .op/.prescale/.postscale say {op "
    "min, prescale 1, postscale 1}; set only .reduction";

TEST(DeprecatedApiTest, BothSpellingsSayingDifferentThingsFailTheSubmission) {
  std::vector<float> x(4, 1.0f);
  const TensorView v = view_of(x.data(), {4});
  const AllreduceOptions both{.reduction = {.op = ReduceOp::kMax}, .op = ReduceOp::kMin};
  auto entry = build_allreduce("x", v, v, both);
  EXPECT_EQ(entry.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(entry.status().message(), kConflict);
  auto grouped = build_grouped_allreduce("x", {v}, both);
  EXPECT_EQ(grouped.status().message(), kConflict);
  // Through the public API the Handle has failed at submission, before init() too.
  Handle h = kolo::allreduce_async("x", v, both);
  EXPECT_EQ(h.wait().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.wait().message(), kConflict);
  EXPECT_EQ(x, std::vector<float>(4, 1.0f));
  // A flat member set to its default value still counts as set: 0.2 code that forces a sum on
  // options asking for an average is told so, not silently ignored.
  AllreduceOptions forced{.reduction = {.op = ReduceOp::kAverage}};
  forced.op = ReduceOp::kSum;
  Result<Reduction> r = effective_reduction(forced);
  EXPECT_EQ(r.status().message(),
            "AllreduceOptions sets the reduction twice, differently: .reduction is {op average, "
            "prescale 1, postscale 1} but the deprecated flat members .op/.prescale/.postscale "
            "say {op sum, prescale 1, postscale 1}; set only .reduction");
}

// Real allreduces over three in-process ranks: the old spelling and the new one side by side,
// single and grouped, with exact results. Rank r holds (r + 1) * (i + 1).
TEST(DeprecatedApiTest, TheOldSpellingAllreducesAsTheNew) {
  testkit::Cluster c(3);
  c.each([&](int r) {
    auto input = [r](size_t n) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * (i + 1));
      return v;
    };
    std::vector<float> old_avg = input(5), new_avg = input(5), old_max = input(3),
                       new_max = input(3), old_g0 = input(2), old_g1 = input(4);
    const AllreduceOptions old_opts{.op = ReduceOp::kAverage, .prescale = 2.0, .postscale = 0.5};
    const AllreduceOptions new_opts{
        .reduction = {.op = ReduceOp::kAverage, .prescale = 2.0, .postscale = 0.5}};
    AllreduceOptions old_max_opts;
    old_max_opts.op = ReduceOp::kMax;
    std::vector<Handle> hs;
    hs.push_back(testkit::allreduce(c[r], "old.avg", old_avg, old_opts));
    hs.push_back(testkit::allreduce(c[r], "new.avg", new_avg, new_opts));
    hs.push_back(testkit::allreduce(c[r], "old.max", old_max, old_max_opts));
    hs.push_back(
        testkit::allreduce(c[r], "new.max", new_max, {.reduction = {.op = ReduceOp::kMax}}));
    hs.push_back(testkit::submit(
        c[r],
        build_grouped_allreduce(
            "old.group", {view_of(old_g0.data(), {2}), view_of(old_g1.data(), {4})}, old_opts)));
    for (Handle& h : hs) EXPECT_TRUE(h.wait().ok()) << h.wait().to_string();
    EXPECT_EQ(old_avg, new_avg);
    EXPECT_EQ(old_max, new_max);
    // average of 2 * (r + 1) * (i + 1) over r = 0, 1, 2, halved: 2 * (i + 1).
    EXPECT_EQ(new_avg, (std::vector<float>{2, 4, 6, 8, 10}));
    EXPECT_EQ(new_max, (std::vector<float>{3, 6, 9}));
    EXPECT_EQ(old_g0, (std::vector<float>{2, 4}));
    EXPECT_EQ(old_g1, (std::vector<float>{2, 4, 6, 8}));
  });
}

}  // namespace
}  // namespace kolo::coord
