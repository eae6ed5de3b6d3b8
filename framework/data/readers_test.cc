// IDX and CIFAR-10 readers on small files made here, including malformed ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "framework/data/cifar_reader.h"
#include "framework/data/dataset.h"
#include "framework/data/idx_reader.h"
#include "framework/data/test_files.h"
#include "kolo/status.h"

namespace kolo::fw {
namespace {

using testing::expect_error;
using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

IdxArray small_images() {  // 3 images of 2x2
  IdxArray a;
  a.type = IdxType::kUInt8;
  a.dims = {3, 2, 2};
  for (int i = 0; i < 12; ++i) a.data.push_back(static_cast<uint8_t>(i * 20));
  return a;
}

IdxArray small_labels(int n = 3) {
  IdxArray a;
  a.type = IdxType::kUInt8;
  a.dims = {n};
  for (int i = 0; i < n; ++i) a.data.push_back(static_cast<uint8_t>(7 - i));
  return a;
}

TEST(IdxReader, RoundTripRawAndGzip) {
  ScratchDir dir("idx");
  for (bool gz : {false, true}) {
    const std::string path = dir.file(gz ? "img.gz" : "img");
    write_idx(path, small_images(), gz);
    const auto bytes = read_bytes(path);
    EXPECT_EQ(bytes[0] == 0x1f && bytes[1] == 0x8b, gz);
    IdxArray back = read_idx(path);
    EXPECT_EQ(back.type, IdxType::kUInt8);
    EXPECT_EQ(back.dims, (std::vector<int64_t>{3, 2, 2}));
    EXPECT_EQ(back.data, small_images().data);
  }
}

TEST(IdxReader, MultiByteElementsAreBigEndian) {
  ScratchDir dir("idx");
  // int32 [2]: 0x01020304 and -2, written by hand in big-endian.
  write_bytes(dir.file("i32"), {0, 0, 0x0C, 1, 0, 0, 0, 2, 1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe});
  IdxArray a = read_idx(dir.file("i32"));
  ASSERT_EQ(a.data.size(), 8u);
  int32_t v[2];
  std::memcpy(v, a.data.data(), 8);
  EXPECT_EQ(v[0], 0x01020304);
  EXPECT_EQ(v[1], -2);
}

// Dimensions 2^31 x 2^31 x 0 describe an empty array: it reads, and numel() is 0 rather than
// an overflowing product (a libFuzzer finding, fuzz_data_files).
TEST(IdxReader, AZeroDimensionEmptiesTheArrayWhateverTheOthers) {
  ScratchDir dir("idx");
  write_bytes(dir.file("empty"), {0, 0, 0x08, 3, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0});
  IdxArray a = read_idx(dir.file("empty"));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{int64_t{1} << 31, int64_t{1} << 31, 0}));
  EXPECT_EQ(a.numel(), 0);
  EXPECT_TRUE(a.data.empty());
}

TEST(IdxReader, MalformedFilesNameFileOffsetAndExpectation) {
  ScratchDir dir("idx");
  const std::string f = dir.file("bad");
  const std::string pre = "idx file '" + f + "': ";
  write_bytes(f, {0, 0});
  expect_error(
      [&] { read_idx(f); }, StatusCode::kInvalidArgument,
      pre + "offset 0: expected 4-byte IDX magic (00 00 type ndim), file ends after 2 bytes");
  write_bytes(f, {1, 0, 8, 1, 0, 0, 0, 0});
  expect_error([&] { read_idx(f); }, StatusCode::kInvalidArgument,
               pre + "offset 0: expected IDX magic starting with two zero bytes, got 1 0");
  write_bytes(f, {0, 0, 7, 1, 0, 0, 0, 0});
  expect_error([&] { read_idx(f); }, StatusCode::kInvalidArgument,
               pre + "offset 2: expected element type 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E, got 7");
  write_bytes(f, {0, 0, 8, 0});
  expect_error([&] { read_idx(f); }, StatusCode::kInvalidArgument,
               pre + "offset 3: expected 1 to 8 dimensions, got 0");
  write_bytes(f, {0, 0, 8, 3, 0, 0, 0, 2, 0, 0});
  expect_error([&] { read_idx(f); }, StatusCode::kInvalidArgument,
               pre +
                   "offset 4: expected 3 big-endian uint32 dimension sizes, file ends after "
                   "10 bytes");
  // Truncated data: [2, 3] uint8 needs 6 bytes, 4 present.
  write_bytes(f, {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4});
  expect_error([&] { read_idx(f); }, StatusCode::kInvalidArgument,
               pre +
                   "offset 12: expected 6 bytes of element data (2 x 3 uint8), file ends after "
                   "16 bytes");
  write_bytes(f, {0, 0, 8, 1, 0, 0, 0, 1, 9, 9});
  expect_error([&] { read_idx(f); }, StatusCode::kInvalidArgument,
               pre +
                   "offset 9: expected end of file after element data (1 uint8), found 1 "
                   "trailing bytes");
  // Dimensions whose product overflows must not allocate.
  write_bytes(f, {0, 0, 0x0E, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1});
  expect_error([&] { read_idx(f); }, StatusCode::kInvalidArgument,
               pre +
                   "offset 12: expected more bytes of element data (4294967295 x 4294967295 "
                   "float64), file ends after 13 bytes");
}

TEST(IdxReader, MissingTruncatedAndCorruptGzip) {
  ScratchDir dir("idx");
  const std::string missing = dir.file("missing.gz");
  expect_error([&] { read_idx(missing); }, StatusCode::kIoError,
               "idx file '" + missing + "': cannot open: No such file or directory");

  expect_error([&] { read_idx(dir.path().string()); }, StatusCode::kIoError,
               "idx file '" + dir.path().string() +
                   "': read failed after 0 decompressed bytes: Is a directory");

  IdxArray big;
  big.dims = {4000};
  for (int i = 0; i < 4000; ++i) big.data.push_back(static_cast<uint8_t>((i * 7919) >> 3));
  const std::string gz = dir.file("big.gz");
  write_idx(gz, big, true);
  std::vector<uint8_t> bytes = read_bytes(gz);

  const std::string cut = dir.file("cut.gz");
  write_bytes(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  try {
    read_idx(cut);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kIoError);
    const std::string m = e.status().message();
    EXPECT_EQ(m.rfind("idx file '" + cut + "': truncated or corrupt gzip stream after ", 0), 0u)
        << m;
    EXPECT_NE(m.find("unexpected end of file"), std::string::npos) << m;
  }

  // Damage in the gzip trailer's CRC: the data inflates but does not match its checksum.
  std::vector<uint8_t> bad = bytes;
  bad[bad.size() - 8] ^= 0xff;
  const std::string crc = dir.file("crc.gz");
  write_bytes(crc, bad);
  try {
    read_idx(crc);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), StatusCode::kIoError) << e.what();
    EXPECT_NE(e.status().message().find("idx file '" + crc + "': "), std::string::npos);
    EXPECT_NE(e.status().message().find("gzip stream"), std::string::npos) << e.what();
  }
}

TEST(MnistDataset, LoadsAndChecksAgreement) {
  ScratchDir dir("mnist");
  write_idx(dir.file("img.gz"), small_images(), true);
  write_idx(dir.file("lbl"), small_labels(), false);
  ImageDataset ds = load_mnist(dir.file("img.gz"), dir.file("lbl"));
  ASSERT_EQ(ds.size(), 3);
  Example e = ds.get(1);
  EXPECT_EQ(e.y, 6);
  EXPECT_EQ(e.x.shape(), (Shape{1, 2, 2}));
  EXPECT_FLOAT_EQ(e.x.to_vector()[0], 80.0f / 255.0f);
  EXPECT_FLOAT_EQ(e.x.to_vector()[3], 140.0f / 255.0f);
  ImageDataset norm = load_mnist(dir.file("img.gz"), dir.file("lbl"), {0.5f}, {0.25f});
  EXPECT_FLOAT_EQ(norm.get(0).x.to_vector()[0], -2.0f);  // (0 - 0.5) / 0.25

  write_idx(dir.file("lbl4"), small_labels(4), false);
  expect_error([&] { load_mnist(dir.file("img.gz"), dir.file("lbl4")); },
               StatusCode::kInvalidArgument,
               "load_mnist('" + dir.file("img.gz") + "', '" + dir.file("lbl4") +
                   "'): the files disagree on the number of examples: 3 images, 4 labels");
  expect_error([&] { load_mnist(dir.file("lbl"), dir.file("lbl")); }, StatusCode::kInvalidArgument,
               "load_mnist('" + dir.file("lbl") + "', '" + dir.file("lbl") +
                   "'): images must be uint8 [N, H, W], got uint8 [3]");
  expect_error([&] { ds.get(3); }, StatusCode::kInvalidArgument,
               "ImageDataset::get: index must be in [0, 3), got 3");
}

// Records laid end to end (built by copy into a sized buffer: GCC 12 misreports insert()).
std::vector<uint8_t> concat(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  std::vector<uint8_t> out(a.size() + b.size());
  std::copy(a.begin(), a.end(), out.begin());
  std::copy(b.begin(), b.end(), out.begin() + static_cast<std::ptrdiff_t>(a.size()));
  return out;
}

std::vector<uint8_t> cifar_record(uint8_t label, uint8_t fill) {
  std::vector<uint8_t> r(kCifarRecordBytes, fill);
  r[0] = label;
  r[1] = 255;  // first red pixel
  return r;
}

TEST(CifarReader, ReadsRecordsAndConcatenatesFiles) {
  ScratchDir dir("cifar");
  const std::vector<uint8_t> ab = concat(cifar_record(3, 10), cifar_record(9, 20));
  write_bytes(dir.file("b1.bin"), ab);
  write_bytes(dir.file("b2.bin"), cifar_record(0, 30));
  CifarArray one = read_cifar10(dir.file("b1.bin"));
  EXPECT_EQ(one.count, 2);
  EXPECT_EQ(one.labels, (std::vector<uint8_t>{3, 9}));
  EXPECT_EQ(one.images[0], 255);
  EXPECT_EQ(one.images[kCifarImageBytes - 1], 10);
  ImageDataset ds = load_cifar10({dir.file("b1.bin"), dir.file("b2.bin")});
  ASSERT_EQ(ds.size(), 3);
  Example e = ds.get(2);
  EXPECT_EQ(e.y, 0);
  EXPECT_EQ(e.x.shape(), (Shape{3, 32, 32}));
  EXPECT_FLOAT_EQ(e.x.to_vector()[0], 1.0f);
  EXPECT_FLOAT_EQ(e.x.to_vector()[3071], 30.0f / 255.0f);
}

TEST(CifarReader, MalformedFiles) {
  ScratchDir dir("cifar");
  const std::string f = dir.file("bad.bin");
  const std::string pre = "cifar10 file '" + f + "': ";
  std::vector<uint8_t> data = cifar_record(1, 0);
  data.resize(kCifarRecordBytes + 100);
  write_bytes(f, data);
  expect_error([&] { read_cifar10(f); }, StatusCode::kInvalidArgument,
               pre +
                   "offset 3073: expected a 3073-byte record (1 label + 3072 pixels), file ends "
                   "after 3173 bytes");
  const std::vector<uint8_t> two = concat(cifar_record(1, 0), cifar_record(12, 0));
  write_bytes(f, two);
  expect_error([&] { read_cifar10(f); }, StatusCode::kInvalidArgument,
               pre + "offset 3073: expected a label in [0, 10), got 12");
  write_bytes(f, {});
  expect_error([&] { read_cifar10(f); }, StatusCode::kInvalidArgument,
               pre +
                   "offset 0: expected at least one 3073-byte record (1 label + 3072 pixels), "
                   "file is empty");
  expect_error(
      [&] { read_cifar10(dir.file("none.bin")); }, StatusCode::kIoError,
      "cifar10 file '" + dir.file("none.bin") + "': cannot open: No such file or directory");
}

// The real Fashion-MNIST files when the machine has them (the build machine does).
TEST(FashionMnist, InstalledFilesLoad) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(dir + "t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << dir;
  }
  ImageDataset test =
      load_mnist(dir + "t10k-images-idx3-ubyte.gz", dir + "t10k-labels-idx1-ubyte.gz");
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(test.example_shape(), (Shape{1, 28, 28}));
  std::vector<int64_t> per_class(10, 0);
  for (int64_t y : test.labels()) {
    ASSERT_GE(y, 0);
    ASSERT_LT(y, 10);
    ++per_class[static_cast<size_t>(y)];
  }
  for (int64_t c : per_class) EXPECT_EQ(c, 1000);  // the test split is balanced
  const std::vector<float> x = test.get(0).x.to_vector();
  EXPECT_GE(*std::min_element(x.begin(), x.end()), 0.0f);
  EXPECT_LE(*std::max_element(x.begin(), x.end()), 1.0f);
}

}  // namespace
}  // namespace kolo::fw
