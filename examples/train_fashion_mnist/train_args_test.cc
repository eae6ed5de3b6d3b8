#include "examples/train_fashion_mnist/train_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kolo::example {
namespace {

Result<TrainArgs> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "train_fashion_mnist");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_args(static_cast<int>(argv.size()), argv.data());
}

TEST(TrainArgs, Defaults) {
  auto r = parse({});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, ModelKind::kCnn);
  EXPECT_EQ(r->epochs, 4);
  EXPECT_EQ(r->batch_size, 64);
  EXPECT_EQ(r->scaling, ScalingRule::kLinear);
  EXPECT_EQ(r->device, DeviceChoice::kAuto);
  EXPECT_EQ(r->data_dir, "/usr/share/datasets/fashion-mnist");
  EXPECT_LT(r->min_accuracy, 0);
  EXPECT_FALSE(r->resume);
  EXPECT_FALSE(r->bucket_bytes.has_value());
  EXPECT_EQ(r->shard, 0);
}

TEST(TrainArgs, BothValueForms) {
  auto r = parse({"--model",
                  "mlp",
                  "--epochs=2",
                  "--batch-size",
                  "128",
                  "--lr=0.1",
                  "--lr-scaling",
                  "sqrt",
                  "--warmup-epochs",
                  "1.5",
                  "--seed",
                  "7",
                  "--train-subset",
                  "6000",
                  "--test-subset=1000",
                  "--timeline",
                  "t.json",
                  "--checkpoint",
                  "c.kolo",
                  "--resume",
                  "--min-accuracy",
                  "0.75",
                  "--device",
                  "cpu",
                  "--data-dir",
                  "/d",
                  "--bucket-size=1MiB"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, ModelKind::kMlp);
  EXPECT_EQ(r->epochs, 2);
  EXPECT_EQ(r->batch_size, 128);
  EXPECT_DOUBLE_EQ(r->lr, 0.1);
  EXPECT_EQ(r->scaling, ScalingRule::kSqrt);
  EXPECT_DOUBLE_EQ(r->warmup_epochs, 1.5);
  EXPECT_EQ(r->seed, 7u);
  EXPECT_EQ(r->train_subset, 6000);
  EXPECT_EQ(r->test_subset, 1000);
  EXPECT_EQ(r->timeline, "t.json");
  EXPECT_EQ(r->checkpoint, "c.kolo");
  EXPECT_TRUE(r->resume);
  EXPECT_DOUBLE_EQ(r->min_accuracy, 0.75);
  EXPECT_EQ(r->device, DeviceChoice::kCpu);
  EXPECT_EQ(r->data_dir, "/d");
  EXPECT_EQ(r->bucket_bytes, 1 << 20);
  EXPECT_EQ(parse({"--bucket-size", "0"})->bucket_bytes, 0);
  EXPECT_EQ(parse({"--shard", "2"})->shard, 2);
}

TEST(TrainArgs, RejectsBadValuesNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--epochs", "0"}, "--epochs: expected an integer in [1, 1000000], got '0'"},
      {{"--epochs", "3x"}, "--epochs: expected an integer in [1, 1000000], got '3x'"},
      {{"--epochs", "4294967296"},
       "--epochs: expected an integer in [1, 1000000], got '4294967296'"},
      {{"--batch-size", "-4"}, "--batch-size: expected an integer >= 1, got '-4'"},
      {{"--model", "resnet"}, "--model: expected mlp or cnn, got 'resnet'"},
      {{"--lr-scaling", "cubic"}, "--lr-scaling: expected linear, sqrt or none, got 'cubic'"},
      {{"--min-accuracy", "1.5"}, "--min-accuracy: expected a number in [0, 1], got '1.5'"},
      {{"--lr", "nan"}, "--lr: expected a number in (0, 1000], got 'nan'"},
      {{"--device", "tpu"}, "--device: expected cpu or cuda, got 'tpu'"},
      {{"--bucket-size", "-1"}, "--bucket-size: expected a size such as 1MiB, 4096 or 0, got '-1'"},
      {{"--shard", "3"}, "--shard: expected 0, 1 or 2, got '3'"},
      {{"--epochs"}, "--epochs: missing value (see --help)"},
      {{"--bogus", "1"}, "unknown argument '--bogus' (see --help)"},
      {{"--resume"}, "--resume: needs --checkpoint PATH to resume from"},
      {{"--commit-every", "0"}, "--commit-every: expected an integer in [1, 1000000000], got '0'"},
      {{"--elastic", "--fail-rank-at", "1"},
       "--fail-rank-at: expected RANK:STEP with RANK >= 0 and STEP >= 0, e.g. 1:25, got '1'"},
      {{"--elastic", "--fail-rank-at", "1:-2"},
       "--fail-rank-at: expected RANK:STEP with RANK >= 0 and STEP >= 0, e.g. 1:25, got '1:-2'"},
      {{"--fail-rank-at", "1:3"}, "--fail-rank-at: needs --elastic (a fixed job would stop)"},
      {{"--elastic", "--checkpoint", "c.kolo"},
       "--checkpoint: not with --elastic, whose state lives in memory (a commit every "
       "--commit-every steps) and survives lost ranks without a file"},
  };
  for (const Case& c : cases) {
    auto r = parse(c.args);
    ASSERT_FALSE(r.ok()) << c.args[0];
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST(TrainArgs, Elastic) {
  auto plain = parse({});
  EXPECT_FALSE(plain->elastic);
  EXPECT_EQ(plain->commit_every, 10);
  EXPECT_LT(plain->fail_rank, 0);
  auto r = parse({"--elastic", "--commit-every=4", "--fail-rank-at", "2:17"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->elastic);
  EXPECT_EQ(r->commit_every, 4);
  EXPECT_EQ(r->fail_rank, 2);
  EXPECT_EQ(r->fail_step, 17);
}

// --cuda-graph: accepted with cuda or auto; the combinations it cannot serve are refused by
// name before anything starts (one rank and a visible GPU are checked at start:
// train_fashion_mnist_cuda_graph_needs_gpu).
TEST(TrainArgs, CudaGraph) {
  EXPECT_FALSE(parse({})->cuda_graph);
  auto r = parse({"--cuda-graph", "--device", "cuda", "--model", "mlp"});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->cuda_graph);
  EXPECT_TRUE(parse({"--cuda-graph"}).ok());  // --device auto
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--cuda-graph", "--device", "cpu"},
       "--cuda-graph: needs a CUDA device (it replays GPU work), got --device cpu"},
      {{"--device=cpu", "--cuda-graph"},
       "--cuda-graph: needs a CUDA device (it replays GPU work), got --device cpu"},
      {{"--cuda-graph", "--elastic"},
       "--cuda-graph: not with --elastic (its world, and so its batches, can change)"},
      {{"--cuda-graph", "--shard", "1"},
       "--cuda-graph: not with --shard 1 (ShardedOptimizer's collectives run during backward, "
       "which the graph captures)"},
  };
  for (const auto& [args, message] : refused) {
    auto bad = parse(args);
    ASSERT_FALSE(bad.ok()) << args[0];
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.status().message(), message);
  }
  EXPECT_NE(train_usage().find("--cuda-graph"), std::string::npos);
}

TEST(TrainArgs, Help) {
  auto r = parse({"--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->help);
  EXPECT_NE(train_usage().find("apt-get install dataset-fashion-mnist"), std::string::npos);
}

}  // namespace
}  // namespace kolo::example
