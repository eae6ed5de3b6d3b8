#include "framework/optim/serialize.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>

#include "framework/data/test_files.h"
#include "framework/nn/layers.h"
#include "framework/optim/adam.h"
#include "framework/optim/sgd.h"

namespace kolo::fw {
namespace {

using testing::expect_error;
using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

struct TinyModel {
  Tensor w = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({0.5f, -0.5f}, {2});
  Tensor running_mean = Tensor::from_vector({0.1f, 0.2f}, {2});  // a buffer, not a parameter
  TinyModel() {
    w.set_requires_grad(true);
    b.set_requires_grad(true);
  }
  NamedTensors named() const {
    return {{"fc.weight", w}, {"fc.bias", b}, {"bn.running_mean", running_mean}};
  }
};

std::vector<std::string> dir_entries(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Serialize, TensorsRoundTripWithEveryDtypeTensorSupports) {
  ScratchDir dir("ckpt");
  Tensor f = Tensor::from_vector({1.5f, -2.25f, 3.0f}, {3, 1});
  Tensor i = Tensor::from_labels({7, -1, 1LL << 40});
  Tensor h = f.to(DataType::kFloat16);
  Tensor scalar = Tensor::full({}, 9.0f);
  Tensor empty = Tensor::zeros({0, 4});
  save_tensors(dir.file("t.kolo"), {{"f", f}, {"i", i}, {"h", h}, {"s", scalar}, {"e", empty}});
  NamedTensors back = load_tensors(dir.file("t.kolo"));
  ASSERT_EQ(back.size(), 5u);
  EXPECT_EQ(back[0].first, "f");
  EXPECT_EQ(back[0].second.shape(), (Shape{3, 1}));
  EXPECT_EQ(back[0].second.to_vector(), f.to_vector());
  EXPECT_EQ(back[1].second.dtype(), DataType::kInt64);
  EXPECT_EQ(
      std::vector<int64_t>(back[1].second.data<int64_t>(), back[1].second.data<int64_t>() + 3),
      (std::vector<int64_t>{7, -1, 1LL << 40}));
  EXPECT_EQ(back[2].second.dtype(), DataType::kFloat16);
  EXPECT_EQ(back[2].second.to_vector(), f.to_vector());  // exactly representable in fp16
  EXPECT_EQ(back[3].second.shape(), Shape{});
  EXPECT_EQ(back[3].second.item(), 9.0f);
  EXPECT_EQ(back[4].second.shape(), (Shape{0, 4}));
  // Header: magic, version 1, 5 entries.
  const auto bytes = read_bytes(dir.file("t.kolo"));
  EXPECT_EQ(std::memcmp(bytes.data(), "KOLOCKPT\x01\0\0\0\x05\0\0\0", 16), 0);
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"t.kolo"});  // no temp files
}

TEST(Serialize, CheckpointRestoresModelAndOptimizerExactly) {
  ScratchDir dir("ckpt");
  TinyModel model;
  Adam opt({model.w, model.b}, {.lr = 0.01});
  for (int s = 0; s < 3; ++s) {
    model.w.set_grad(Tensor::full({2, 3}, 0.1f * (s + 1)));
    model.b.set_grad(Tensor::full({2}, -0.2f));
    opt.step();
  }
  save_checkpoint(dir.file("c.kolo"), model.named(), &opt);

  // A fresh model and optimizer, loaded, then both stepped identically: identical results.
  TinyModel fresh;
  Adam opt2({fresh.w, fresh.b}, {.lr = 0.01});
  load_checkpoint(dir.file("c.kolo"), fresh.named(), &opt2);
  EXPECT_EQ(opt2.step_count(), 3);
  EXPECT_EQ(fresh.w.to_vector(), model.w.to_vector());
  for (auto* m : {&model, &fresh}) {
    m->w.set_grad(Tensor::full({2, 3}, 0.3f));
    m->b.set_grad(Tensor::full({2}, 0.3f));
  }
  opt.step();
  opt2.step();
  EXPECT_EQ(fresh.w.to_vector(), model.w.to_vector());
  EXPECT_EQ(fresh.b.to_vector(), model.b.to_vector());

  NamedTensors all = load_tensors(dir.file("c.kolo"));
  std::vector<std::string> names;
  for (auto& [n, t] : all) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "model/fc.weight", "model/fc.bias", "model/bn.running_mean", "optim/step",
                       "optim/param_steps", "optim/param.0.exp_avg", "optim/param.0.exp_avg_sq",
                       "optim/param.1.exp_avg", "optim/param.1.exp_avg_sq"}));
}

// Stand-ins for nn::Module's accessors: one returns handles, the other pointers.
struct ModuleWithBuffers {
  TinyModel m;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const {
    return {{"fc.weight", m.w}, {"fc.bias", m.b}};
  }
  std::vector<std::pair<std::string, Tensor*>> named_buffers() {
    return {{"bn.running_mean", &m.running_mean}};
  }
};
struct ModuleWithoutBuffers {
  TinyModel m;
  std::vector<std::pair<std::string, Tensor*>> named_parameters() { return {{"w", &m.w}}; }
};

TEST(Serialize, ModuleStateTakesParametersAndBuffers) {
  ModuleWithBuffers with;
  NamedTensors state = module_state(with);
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[2].first, "bn.running_mean");
  EXPECT_TRUE(state[2].second.is_same(with.m.running_mean));
  ModuleWithoutBuffers without;
  ASSERT_EQ(module_state(without).size(), 1u);
  EXPECT_TRUE(module_state(without)[0].second.is_same(without.m.w));

  ScratchDir dir("ckpt");
  with.m.running_mean.fill_(7.0f);
  save_checkpoint(dir.file("m.kolo"), module_state(with), nullptr);
  ModuleWithBuffers fresh;
  load_checkpoint(dir.file("m.kolo"), module_state(fresh), nullptr);
  EXPECT_EQ(fresh.m.running_mean.to_vector(), (std::vector<float>{7.0f, 7.0f}));
}

TEST(Serialize, RealModuleRoundTripIncludesBatchNormRunningStats) {
  ScratchDir dir("ckpt");
  nn::BatchNorm1d bn(3);
  bn.running_mean().fill_(0.25f);
  bn.running_var().fill_(4.0f);
  const NamedTensors state = module_state(bn);
  ASSERT_EQ(state.size(), 4u);  // weight, bias, running_mean, running_var
  save_checkpoint(dir.file("bn.kolo"), state, nullptr);
  nn::BatchNorm1d fresh(3);
  load_checkpoint(dir.file("bn.kolo"), module_state(fresh), nullptr);
  EXPECT_EQ(fresh.running_mean().to_vector(), (std::vector<float>{0.25f, 0.25f, 0.25f}));
  EXPECT_EQ(fresh.running_var().to_vector(), (std::vector<float>{4.0f, 4.0f, 4.0f}));
}

TEST(Serialize, LoadErrorsLeaveTargetsUnchanged) {
  ScratchDir dir("ckpt");
  const std::string path = dir.file("c.kolo");
  TinyModel model;
  save_checkpoint(path, model.named(), nullptr);
  const std::string file = "checkpoint '" + path + "'";

  TinyModel other;
  other.w = Tensor::from_vector({9, 9, 9, 9, 9, 9}, {3, 2});
  expect_error([&] { load_checkpoint(path, other.named(), nullptr); }, StatusCode::kMismatch,
               file + ": entry 'model/fc.weight' has shape [2, 3], expected [3, 2]");
  EXPECT_EQ(other.w.to_vector()[0], 9.0f);

  NamedTensors wrong_dtype = model.named();
  wrong_dtype[1].second = Tensor::zeros({2}, Device::cpu(), DataType::kInt64);
  expect_error([&] { load_checkpoint(path, wrong_dtype, nullptr); }, StatusCode::kMismatch,
               file + ": entry 'model/fc.bias' has dtype float32, expected int64");

  NamedTensors renamed = model.named();
  renamed[2].first = "bn.running_var";
  expect_error([&] { load_checkpoint(path, renamed, nullptr); }, StatusCode::kMismatch,
               file + " has no entry 'model/bn.running_var' (3 entries in the file)");

  NamedTensors fewer = model.named();
  fewer.pop_back();
  expect_error([&] { load_checkpoint(path, fewer, nullptr); }, StatusCode::kMismatch,
               file +
                   " has an unexpected entry 'model/bn.running_mean' that nothing in the model "
                   "or optimizer takes");

  SGD sgd({model.w}, {.lr = 0.1, .momentum = 0.9});
  expect_error([&] { load_checkpoint(path, model.named(), &sgd); }, StatusCode::kMismatch,
               file + " has no entry 'optim/step' (3 entries in the file)");
}

// Issue 15: names read from a file reach error messages escaped, never as raw bytes.
TEST(Serialize, NamesFromTheFileAreEscapedInErrors) {
  ScratchDir dir("ckpt");
  const std::string path = dir.file("odd.kolo");
  const std::string odd = std::string("w\x01\xff\\") + std::string(200, 'n');
  save_tensors(path, {{odd, Tensor::zeros({1})}});
  expect_error([&] { load_tensors_into(path, {}); }, StatusCode::kMismatch,
               "checkpoint '" + path + "' has an unexpected entry 'w\\x01\\xff\\x5c" +
                   std::string(116, 'n') +
                   "... (204 bytes)' that nothing in the model or optimizer takes");
}

TEST(Serialize, MalformedFiles) {
  ScratchDir dir("ckpt");
  const std::string path = dir.file("c.kolo");
  save_tensors(path, {{"ab", Tensor::from_vector({1, 2}, {2})}});
  // Layout: 16 header | 4 len | 2 name | 1 dtype | 1 ndim | 8 dim | 8 nbytes | 8 data | 4 crc
  const std::vector<uint8_t> good = read_bytes(path);
  ASSERT_EQ(good.size(), 52u);
  const std::string bad = dir.file("bad.kolo");
  const std::string file = "checkpoint '" + bad + "'";

  expect_error([&] { load_tensors(dir.file("nope")); }, StatusCode::kIoError,
               "load_tensors: cannot open '" + dir.file("nope") + "': No such file or directory");

  std::vector<uint8_t> b = good;
  b[0] = 'X';
  write_bytes(bad, b);
  expect_error([&] { load_tensors(bad); }, StatusCode::kInvalidArgument,
               file + ": offset 0: expected magic \"KOLOCKPT\"; this is not a Kolo checkpoint");

  b = good;
  b[8] = 2;
  write_bytes(bad, b);
  expect_error([&] { load_tensors(bad); }, StatusCode::kUnsupported,
               file + ": offset 8: format version 2 is not supported; this build reads version 1");

  b = good;
  b[40] ^= 0x01;  // inside the payload
  write_bytes(bad, b);
  try {
    load_tensors(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kIoError);
    EXPECT_EQ(e.status().message().rfind(file + ": checksum mismatch (stored 0x", 0), 0u)
        << e.what();
  }

  b = std::vector<uint8_t>(good.begin(), good.begin() + 46);  // cut inside the payload
  write_bytes(bad, b);
  expect_error([&] { load_tensors(bad); }, StatusCode::kInvalidArgument,
               file +
                   ": offset 40: expected 8 bytes of payload for entry 0 'ab', file ends "
                   "after 46 bytes");

  b = good;
  b[22] = 200;  // dtype code
  write_bytes(bad, b);
  expect_error([&] { load_tensors(bad); }, StatusCode::kInvalidArgument,
               file + ": offset 22: expected a dtype code in [0, 9) for entry 0 'ab', got 200");

  b = good;
  b[32] = 12;  // nbytes 12 for a [2] float32
  write_bytes(bad, b);
  expect_error([&] { load_tensors(bad); }, StatusCode::kInvalidArgument,
               file +
                   ": offset 32: payload size of entry 0 'ab' is 12 bytes, but shape [2] of "
                   "float32 needs 8");

  b = good;
  b.insert(b.end() - 4, {0, 0});  // junk between the last entry and the checksum
  write_bytes(bad, b);
  expect_error([&] { load_tensors(bad); }, StatusCode::kInvalidArgument,
               file +
                   ": offset 48: expected the 4-byte checksum after 1 entries, found 2 extra "
                   "bytes");

  // Sizes whose product passes 2^63 before a 0 (a fuzzer's find: it overflowed Tensor's count).
  const std::string zero = dir.file("zero.kolo");
  save_tensors(zero, {{"ab", Tensor::zeros({1, 1, 0})}});
  b = read_bytes(zero);
  // 16 header | 4 len | 2 name | 1 dtype | 1 ndim | dims at 24, 32, 40 | ...
  b[24 + 7] = 0x40;  // dimension 0: 2^62
  b[32] = 4;         // dimension 1: 4
  write_bytes(bad, b);
  expect_error([&] { load_tensors(bad); }, StatusCode::kInvalidArgument,
               file +
                   ": offset 32: the sizes of entry 0 'ab' multiply past 2^63 elements at "
                   "dimension 1");

  write_bytes(bad, {'K', 'O'});
  expect_error([&] { load_tensors(bad); }, StatusCode::kInvalidArgument,
               file +
                   ": offset 0: expected a header of 16 bytes and a 4-byte checksum, file "
                   "ends after 2 bytes");
}

TEST(Serialize, RejectsBadInputBeforeCreatingAFile) {
  ScratchDir dir("ckpt");
  const std::string path = dir.file("c.kolo");
  Tensor t = Tensor::zeros({2});
  expect_error(
      [&] {
        save_tensors(path, {{"a", t}, {"a", t}});
      },
      StatusCode::kInvalidArgument, "save_tensors: entry 1: duplicate name 'a'");
  expect_error(
      [&] {
        save_tensors(path, {{"", t}});
      },
      StatusCode::kInvalidArgument,
      "save_tensors: entry 0: name length must be in [1, 65535], got 0");
  expect_error(
      [&] {
        save_tensors(path, {{"u", Tensor()}});
      },
      StatusCode::kInvalidArgument, "save_tensors: entry 0 ('u') is undefined");
  EXPECT_TRUE(dir_entries(dir.path()).empty());
}

// A write that fails half-way (here: the file-size limit, a real EFBIG from write(2)) must
// leave the previous checkpoint intact and no temporary file behind.
TEST(Serialize, FailedWriteLeavesPreviousFileAndNoTemporary) {
  ScratchDir dir("ckpt");
  const std::string path = dir.file("c.kolo");
  save_tensors(path, {{"x", Tensor::full({4}, 1.0f)}});
  const std::vector<uint8_t> before = read_bytes(path);

  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  std::string message;
  try {
    save_tensors(path, {{"x", Tensor::full({1 << 16}, 2.0f)}});  // 256 KiB
  } catch (const Error& e) {
    threw = true;
    message = e.status().message();
    EXPECT_EQ(e.status().code(), StatusCode::kIoError);
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_TRUE(threw);
  EXPECT_NE(message.find("save_tensors: write to '" + path + ".tmp-"), std::string::npos)
      << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir_entries(dir.path()), std::vector<std::string>{"c.kolo"});

  const std::string nodir = dir.file("no/such/dir/c.kolo");
  try {
    save_tensors(nodir, {{"x", Tensor::zeros({1})}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kIoError);
    const std::string& m = e.status().message();
    EXPECT_EQ(m.rfind("save_tensors: cannot create temporary file '" + nodir + ".tmp-", 0), 0u)
        << m;
    EXPECT_NE(m.find("': No such file or directory"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kolo::fw
