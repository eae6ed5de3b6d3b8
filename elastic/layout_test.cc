#include "elastic/layout.h"

#include <gtest/gtest.h>

namespace kolo::elastic {
namespace {

EntryLayout tensor(std::string key, DataType dtype, std::vector<int64_t> shape) {
  return {.key = std::move(key), .kind = EntryKind::kTensor, .dtype = dtype, .shape = shape};
}
EntryLayout counter(std::string key) {
  return {.key = std::move(key), .kind = EntryKind::kCounter};
}
EntryLayout bytes(std::string key) { return {.key = std::move(key), .kind = EntryKind::kBytes}; }

DecodedBlock decoded(int64_t commits, const std::vector<EntryLayout>& layout, int rank = 0) {
  Result<DecodedBlock> b = decode_block(encode_block(commits, layout), rank);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? *b : DecodedBlock{};
}

TEST(ElasticLayout, DescribesEachKind) {
  EXPECT_EQ(describe(tensor("w", DataType::kFloat32, {4, 3})), "tensor float32 [4, 3]");
  EXPECT_EQ(describe(tensor("s", DataType::kInt64, {})), "tensor int64 []");
  EXPECT_EQ(describe(bytes("rng")), "bytes");
  EXPECT_EQ(describe(counter("step")), "counter");
}

TEST(ElasticLayout, BlockRoundTripsKeysOfAnyBytes) {
  const std::string odd("a\0b\n\t", 5);
  const DecodedBlock b = decoded(7, {tensor(odd, DataType::kFloat64, {2}), counter("step")});
  EXPECT_EQ(b.commits, 7);
  ASSERT_EQ(b.entries.size(), 2u);
  EXPECT_EQ(b.entries[0].first, odd);
  EXPECT_EQ(b.entries[0].second, "tensor float64 [2]");
  EXPECT_EQ(b.entries[1].first, "step");
  EXPECT_EQ(b.entries[1].second, "counter");
}

TEST(ElasticLayout, MalformedBlockIsInternalNamingTheRank) {
  std::string block = encode_block(1, {counter("step")});
  for (const std::string& bad : {block.substr(0, block.size() - 1), block + "x", std::string()}) {
    Result<DecodedBlock> b = decode_block(bad, 3);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), StatusCode::kInternal);
    EXPECT_NE(b.status().message().find("from rank 3"), std::string::npos)
        << b.status().to_string();
  }
}

TEST(ElasticLayout, EqualLayoutsPassWhateverTheCommitCounts) {
  const std::vector<EntryLayout> l = {tensor("w", DataType::kFloat32, {4}), bytes("b")};
  EXPECT_TRUE(check_layouts("s", {decoded(0, l), decoded(5, l), decoded(2, l)}).ok());
}

TEST(ElasticLayout, MismatchNamesTheFirstKeyWhatEachRankHasAndHowManyDiffer) {
  const std::vector<EntryLayout> a = {tensor("w", DataType::kFloat32, {4, 3}), counter("step")};
  const std::vector<EntryLayout> b = {tensor("w", DataType::kFloat32, {4, 4}), counter("step")};
  const std::vector<EntryLayout> c = {tensor("w", DataType::kFloat32, {4, 3}), counter("epoch"),
                                      counter("step")};
  Status st = check_layouts("model", {decoded(1, a), decoded(1, b), decoded(1, c)});
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_EQ(st.message(),
            "elastic::State 'model': the ranks registered different entries: key 'epoch': "
            "ranks 0, 1 registered nothing; rank 2 registered counter (and 1 more keys differ). "
            "Every rank must register the same keys with the same kinds, dtypes and shapes");
  st = check_layouts("model", {decoded(1, a), decoded(1, b), decoded(1, a)});
  EXPECT_EQ(st.message(),
            "elastic::State 'model': the ranks registered different entries: key 'w': "
            "ranks 0, 2 registered tensor float32 [4, 3]; rank 1 registered tensor float32 "
            "[4, 4]. Every rank must register the same keys with the same kinds, dtypes and "
            "shapes");
}

TEST(ElasticLayout, PlacesTensorsAlignedThenCounters) {
  const Placement p =
      place({tensor("a", DataType::kUInt8, {3}), counter("c"), bytes("b"),
             tensor("d", DataType::kFloat32, {2, 5}), tensor("e", DataType::kFloat64, {0})});
  EXPECT_EQ(p.offsets, (std::vector<size_t>{0, 128, 0, 64, 128}));
  EXPECT_EQ(p.total_bytes, 136u);
  EXPECT_EQ(place({}).total_bytes, 0u);
}

}  // namespace
}  // namespace kolo::elastic
