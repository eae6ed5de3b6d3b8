// KOLO_DETERMINISTIC=1 and the registry: the backends that fold in rank order say so
// (BackendEntry::rank_order), and every other one, whole job or sub-group, is refused before its
// factory runs (so here with no store, no peers, no MPI and no GPU), naming the knob, the backend
// and the way out.
#include <gtest/gtest.h>

#include <string>

#include "backends/registry.h"
#include "common/knobs.h"

namespace kolo {
namespace {

TEST(DeterministicRegistry, OnlyTheChannelBackendsAndShmFoldInRankOrder) {
  for (const BackendEntry& entry : registered_backends()) {
    const bool expected = entry.name == "tcp" || entry.name == "shm";
    EXPECT_EQ(entry.rank_order, expected) << entry.name;
  }
}

TEST(DeterministicRegistry, ABackendThatCannotHonourItIsRefusedAtCreation) {
  Result<KnobSet> knobs = KnobSet::read({{"KOLO_DETERMINISTIC", "1"}});
  ASSERT_TRUE(knobs.ok()) << knobs.status().to_string();
  int refused = 0;
  for (const BackendEntry& entry : registered_backends()) {
    if (entry.rank_order) continue;
    BackendContext ctx;
    ctx.knobs = &*knobs;
    ctx.op_timeout = std::chrono::milliseconds(1000);
    ctx.connect_timeout = std::chrono::milliseconds(1000);
    for (const Result<std::unique_ptr<Backend>>& made :
         {create_backend(entry.name, ctx), create_subgroup_backend(entry.name, ctx, {0})}) {
      ASSERT_FALSE(made.ok()) << entry.name;
      EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(
          made.status().message().rfind("KOLO_DETERMINISTIC=1: backend " + std::string(entry.name) +
                                            " cannot reduce in a fixed order",
                                        0),
          0u)
          << made.status().to_string();
      EXPECT_NE(made.status().message().find("docs/determinism.md"), std::string::npos);
      ++refused;
    }
  }
  // Not vacuous where the build has mpi or nccl; a tcp+shm build has nothing to refuse.
  SUCCEED() << refused << " refusals";
}

}  // namespace
}  // namespace kolo
