#include "coordinator/config.h"

#include <gtest/gtest.h>

#include <map>

#include "backends/registry.h"
#include "common/build_info.h"
#include "coordinator/runtime.h"

namespace kolo::coord {
namespace {

RuntimeConfig parse(const std::map<std::string, std::string>& env,
                    const std::string& default_ops = "tcp") {
  Result<KnobSet> knobs = KnobSet::read(env);
  EXPECT_TRUE(knobs.ok()) << knobs.status().to_string();
  Result<RuntimeConfig> c =
      config_from_knobs(knobs.ok() ? *knobs : KnobSet::defaults(), default_ops);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : RuntimeConfig{};
}

TEST(ConfigTest, AutotuneKnobsAndTheirRanges) {
  const RuntimeConfig d = parse({});
  EXPECT_FALSE(d.autotune.enabled);
  EXPECT_FALSE(d.autotune.fusion_fixed);
  const RuntimeConfig c = parse({{"KOLO_AUTOTUNE", "1"},
                                 {"KOLO_CYCLE_TIME", "2ms"},
                                 {"KOLO_AUTOTUNE_LOG", "/t/tune.csv"},
                                 {"KOLO_AUTOTUNE_CONTINUOUS", "1"},
                                 {"KOLO_AUTOTUNE_SAMPLES", "5"},
                                 {"KOLO_AUTOTUNE_FUSION_FROM", "1KiB"},
                                 {"KOLO_AUTOTUNE_FUSION_TO", "2KiB"},
                                 {"KOLO_AUTOTUNE_CYCLE_FROM", "3us"},
                                 {"KOLO_AUTOTUNE_CYCLE_TO", "4ms"},
                                 {"KOLO_AUTOTUNE_BUCKET_FROM", "5KiB"},
                                 {"KOLO_AUTOTUNE_BUCKET_TO", "6MiB"}});
  EXPECT_TRUE(c.autotune.enabled);
  EXPECT_TRUE(c.autotune.cycle_fixed);
  EXPECT_FALSE(c.autotune.fusion_fixed);
  EXPECT_EQ(c.autotune.log_path, "/t/tune.csv");
  EXPECT_TRUE(c.autotune.continuous);
  EXPECT_EQ(c.autotune.samples, 5);
  EXPECT_EQ(c.autotune.fusion_min, 1u << 10);
  EXPECT_EQ(c.autotune.fusion_max, 2u << 10);
  EXPECT_EQ(c.autotune.cycle_min, std::chrono::microseconds(3));
  EXPECT_EQ(c.autotune.cycle_max, std::chrono::milliseconds(4));
  EXPECT_EQ(c.autotune.bucket_min, 5u << 10);
  EXPECT_EQ(c.autotune.bucket_max, 6u << 20);

  Result<KnobSet> inverted =
      KnobSet::read({{"KOLO_AUTOTUNE_CYCLE_FROM", "5ms"}, {"KOLO_AUTOTUNE_CYCLE_TO", "1ms"}});
  ASSERT_TRUE(inverted.ok());
  Result<RuntimeConfig> bad = config_from_knobs(*inverted, "tcp");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "KOLO_AUTOTUNE_CYCLE_FROM=5ms exceeds KOLO_AUTOTUNE_CYCLE_TO=1ms: the autotuner's "
            "range is empty");
  Result<KnobSet> maybe = KnobSet::read({{"KOLO_AUTOTUNE", "maybe"}});
  ASSERT_FALSE(maybe.ok());
  EXPECT_NE(maybe.status().message().find("KOLO_AUTOTUNE=maybe"), std::string::npos)
      << maybe.status().to_string();
}

// The categorical tunables come from the registry: the hierarchical allreduce, at its value,
// searched only when the user left it unset.
TEST(ConfigTest, CategoricalTunablesComeFromTheRegistryAndASetOneIsFixed) {
  const RuntimeConfig d = parse({{"KOLO_AUTOTUNE", "1"}});
  ASSERT_EQ(d.autotune.categorical.size(), 1u);
  const CategoricalTunable& t = d.autotune.categorical[0];
  EXPECT_EQ(t.id, KnobId::kHierarchicalAllreduce);
  EXPECT_EQ(t.choices, (std::vector<std::string_view>{"0", "1"}));
  EXPECT_EQ(t.initial, 0u);
  EXPECT_FALSE(t.fixed);
  for (const char* value : {"0", "on"}) {
    const RuntimeConfig c = parse({{"KOLO_AUTOTUNE", "1"}, {"KOLO_HIERARCHICAL_ALLREDUCE", value}});
    ASSERT_EQ(c.autotune.categorical.size(), 1u);
    EXPECT_TRUE(c.autotune.categorical[0].fixed) << value;
    EXPECT_EQ(c.autotune.categorical[0].initial, std::string(value) == "on" ? 1u : 0u);
  }
}

// A knob left unset takes its row's default, written there only: RuntimeConfig has none of its
// own (a default-constructed one holds zeros).
TEST(ConfigTest, UnsetKnobsTakeTheirRowsDefaults) {
  const RuntimeConfig c = parse({});
  const KnobSet& d = KnobSet::defaults();
  EXPECT_EQ(c.fusion_threshold, d.size(KnobId::kFusionThreshold));
  EXPECT_EQ(c.cycle_time, d.duration(KnobId::kCycleTime));
  EXPECT_EQ(c.cache_capacity, static_cast<uint64_t>(d.integer(KnobId::kCacheCapacity)));
  EXPECT_EQ(c.stall_check_time, d.duration(KnobId::kStallCheckTime));
  EXPECT_EQ(c.op_timeout, d.duration(KnobId::kOpTimeout));
  EXPECT_EQ(c.autotune.samples, d.integer(KnobId::kAutotuneSamples));
  EXPECT_EQ(c.autotune.max_steps, d.integer(KnobId::kAutotuneSteps));
  EXPECT_EQ(c.autotune.bucket_max, d.size(KnobId::kAutotuneBucketTo));
  EXPECT_FALSE(c.hierarchical_allreduce);
  EXPECT_TRUE(parse({{"KOLO_HIERARCHICAL_ALLREDUCE", "1"}}).hierarchical_allreduce);
  EXPECT_EQ(c.timeline_path, "");
  EXPECT_FALSE(c.timeline_mark_cycles);
  // Both timeouts are far above 800 ms, so the heartbeat takes its ceiling.
  EXPECT_EQ(c.heartbeat, std::chrono::milliseconds(200));
  const RuntimeConfig blank;
  EXPECT_EQ(blank.fusion_threshold, 0u);
  EXPECT_EQ(blank.op_timeout.count(), 0);
  EXPECT_EQ(blank.cpu_operations, "");
}

TEST(ConfigTest, ReadsEveryKnobWithUnits) {
  const RuntimeConfig c = parse({{"KOLO_FUSION_THRESHOLD", "1MiB"},
                                 {"KOLO_CYCLE_TIME", "5ms"},
                                 {"KOLO_CACHE_CAPACITY", "7"},
                                 {"KOLO_TIMELINE", "/t/x.json"},
                                 {"KOLO_TIMELINE_MARK_CYCLES", "yes"},
                                 {"KOLO_TIMELINE_STEPS", "3:9"},
                                 {"KOLO_STALL_CHECK_TIME", "0"},
                                 {"KOLO_STALL_SHUTDOWN_TIME", "2min"},
                                 {"KOLO_OP_TIMEOUT", "40ms"},
                                 {"KOLO_CPU_OPERATIONS", "tcp"}},
                                "mpi");
  EXPECT_EQ(c.fusion_threshold, 1u << 20);
  EXPECT_EQ(c.cycle_time, std::chrono::milliseconds(5));
  EXPECT_EQ(c.cache_capacity, 7u);
  EXPECT_EQ(c.timeline_path, "/t/x.json");
  EXPECT_TRUE(c.timeline_mark_cycles);
  ASSERT_TRUE(c.timeline_steps.has_value());
  EXPECT_EQ(c.timeline_steps->first, 3);
  EXPECT_EQ(c.timeline_steps->end, 9);
  EXPECT_FALSE(parse({}).timeline_steps.has_value());
  EXPECT_EQ(c.stall_check_time.count(), 0);
  EXPECT_EQ(c.stall_shutdown_time, std::chrono::minutes(2));
  EXPECT_EQ(c.op_timeout, std::chrono::milliseconds(40));
  EXPECT_EQ(c.cpu_operations, "tcp") << "a set KOLO_CPU_OPERATIONS wins over the launcher's";
  EXPECT_EQ(c.heartbeat, std::chrono::milliseconds(10)) << "a quarter of the op timeout";
}

TEST(ConfigTest, UnsetCpuOperationsTakesTheCallersDefault) {
  EXPECT_EQ(parse({}, "mpi").cpu_operations, "mpi");
  EXPECT_EQ(parse({}, "shm").cpu_operations, "shm");
  EXPECT_FALSE(KnobSet::defaults().is_set(KnobId::kCpuOperations));
}

TEST(ConfigTest, TimelinePathPerRank) {
  EXPECT_EQ(timeline_path_for_rank("/t/trace.json", 0, 1), "/t/trace.json");
  EXPECT_EQ(timeline_path_for_rank("/t/trace.json", 2, 4), "/t/trace.rank2.json");
  EXPECT_EQ(timeline_path_for_rank("/t/r{rank}.json", 3, 4), "/t/r3.json");
  EXPECT_EQ(timeline_path_for_rank("/t/trace.json.gz", 1, 2), "/t/trace.rank1.json.gz");
  EXPECT_EQ(timeline_path_for_rank("/t/trace.gz", 1, 2), "/t/trace.rank1.gz");
  EXPECT_EQ(timeline_path_for_rank("/t/trace", 1, 2), "/t/trace.rank1");
}

}  // namespace
}  // namespace kolo::coord

namespace kolo::coord {
namespace {

// KOLO_GPU_OPERATIONS accepts the backends of the build, from the registry, and only those.
TEST(ConfigTest, GpuOperationsIsReadAndNcclIsNoCpuBackend) {
  EXPECT_EQ(parse({}).gpu_operations, "");  // unset: gpu_backend_choice picks the default
  EXPECT_EQ(parse({{"KOLO_GPU_OPERATIONS", "tcp"}}).gpu_operations, "tcp");
  Result<KnobSet> bad = KnobSet::read({{"KOLO_GPU_OPERATIONS", "gloo"}});
  ASSERT_FALSE(bad.ok());
  std::string built;
  for (std::string_view b : built_backends()) built += (built.empty() ? "" : ", ") + std::string(b);
  EXPECT_EQ(bad.status().message(),
            "KOLO_GPU_OPERATIONS=gloo is invalid: expected one of " + built);
  if (!find_backend("nccl").ok()) {
    EXPECT_FALSE(KnobSet::read({{"KOLO_GPU_OPERATIONS", "nccl"}}).ok());
    GTEST_SKIP() << "this build has no nccl backend";
  }
  EXPECT_EQ(parse({{"KOLO_GPU_OPERATIONS", "nccl"}}).gpu_operations, "nccl");
  Result<KnobSet> knobs = KnobSet::read({{"KOLO_CPU_OPERATIONS", "nccl"}});
  ASSERT_TRUE(knobs.ok()) << knobs.status().to_string();
  Result<RuntimeConfig> c = config_from_knobs(*knobs, "tcp");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().to_string(),
            "InvalidArgument: KOLO_CPU_OPERATIONS=nccl: backend nccl takes no CPU tensors; use "
            "it as KOLO_GPU_OPERATIONS");
}

}  // namespace
}  // namespace kolo::coord
