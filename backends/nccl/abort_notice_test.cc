// AbortNotice over a real in-process store: the first abort's reason is what every rank reads.
#include "backends/nccl/abort_notice.h"

#include <gtest/gtest.h>

#include "rendezvous/memory_store.h"

namespace kolo::nccl {
namespace {

TEST(AbortNoticeTest, NoneUntilARankAbortsThenTheFirstReasonForEveryone) {
  MemoryStore store;
  AbortNotice rank0(&store, "kolo/s0/data/gpu", 0), rank1(&store, "kolo/s0/data/gpu", 1),
      rank2(&store, "kolo/s0/data/gpu", 2);
  Result<std::optional<std::string>> none = rank1.first();
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(rank2
                  .publish(Status::Internal("the nccl communicator: NCCL error "
                                            "ncclUnhandledCudaError: unhandled cuda error"))
                  .ok());
  // rank 0 then times out waiting for rank 2's side: a consequence, not the cause.
  ASSERT_TRUE(rank0.publish(Status::Timeout("allreduce 'w': did not complete on the GPU")).ok());
  for (AbortNotice* reader : {&rank0, &rank1, &rank2}) {
    Result<std::optional<std::string>> first = reader->first();
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ(first->value_or("none"),
              "rank 2: Internal: the nccl communicator: NCCL error ncclUnhandledCudaError: "
              "unhandled cuda error");
  }
  // Another group (a process set, its own prefix) saw nothing.
  AbortNotice other(&store, "kolo/s0/set1/gpu", 1);
  EXPECT_FALSE(other.first().value().has_value());
}

TEST(AbortNoticeTest, AOneRankGroupHasNoStoreAndNoNotices) {
  AbortNotice alone(nullptr, "kolo/s0/data/gpu", 0);
  EXPECT_TRUE(alone.publish(Status::Timeout("allreduce 'w'")).ok());
  EXPECT_FALSE(alone.first().value().has_value());
}

}  // namespace
}  // namespace kolo::nccl
