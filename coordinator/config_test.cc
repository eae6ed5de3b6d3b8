#include "coordinator/config.h"

#include <gtest/gtest.h>

#include <map>

#include "coordinator/runtime.h"

namespace kolo::coord {
namespace {

Result<RuntimeConfig> parse(std::map<std::string, std::string> env) {
  return config_from_env("tcp", [env](const char* var) -> const char* {
    auto it = env.find(var);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ConfigTest, DefaultsAndUnits) {
  auto c = parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->fusion_threshold, 4u << 20);
  EXPECT_EQ(c->cache_capacity, 1024u);
  c = parse({{"KOLO_FUSION_THRESHOLD", "1MiB"}, {"KOLO_CYCLE_TIME", "5ms"},
             {"KOLO_STALL_CHECK_TIME", "0"}, {"KOLO_CPU_OPERATIONS", "mpi"}});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->fusion_threshold, 1u << 20);
  EXPECT_EQ(c->cycle_time, std::chrono::milliseconds(5));
  EXPECT_EQ(c->stall_check_time.count(), 0);
  EXPECT_EQ(c->cpu_operations, "mpi");
}

TEST(ConfigTest, InvalidValuesNameTheVariableAndAcceptedForms) {
  auto c = parse({{"KOLO_FUSION_THRESHOLD", "lots"}});
  EXPECT_EQ(c.status().message(),
            "KOLO_FUSION_THRESHOLD=lots is invalid: expected a size such as 64MiB, 1GB or 4096 (bytes)");
  EXPECT_EQ(parse({{"KOLO_CPU_OPERATIONS", "gloo"}}).status().message(),
            "KOLO_CPU_OPERATIONS=gloo is invalid: expected tcp or mpi");
  EXPECT_EQ(parse({{"KOLO_CACHE_CAPACITY", "-1"}}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse({{"KOLO_OP_TIMEOUT", "0"}}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ConfigTest, TimelinePathPerRank) {
  EXPECT_EQ(timeline_path_for_rank("/t/trace.json", 0, 1), "/t/trace.json");
  EXPECT_EQ(timeline_path_for_rank("/t/trace.json", 2, 4), "/t/trace.rank2.json");
  EXPECT_EQ(timeline_path_for_rank("/t/r{rank}.json", 3, 4), "/t/r3.json");
  EXPECT_EQ(timeline_path_for_rank("/t/trace", 1, 2), "/t/trace.rank1");
}

}  // namespace
}  // namespace kolo::coord
