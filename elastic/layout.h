// The layout of an elastic::State: what each key is (kind, dtype, shape), as the ranks compare
// it before their first commit and at every sync. Pure functions of values; thread-safe.
//
// Note [State layout]. A commit copies every entry into one host buffer, at offsets that follow
// from the layout alone (keys in sorted order, whatever order they were registered in). Ranks
// whose layouts are equal therefore have byte-for-byte compatible snapshots, and sync() moves
// the tensors and counters of a State as one broadcast of that buffer. So the layouts are
// checked once, at the first collective call, and frozen: later commits are local memcpys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::elastic {

enum class EntryKind : uint8_t { kTensor, kBytes, kCounter };

// One registered key; dtype and shape are meaningful for tensors only.
struct EntryLayout {
  std::string key = {};
  EntryKind kind = EntryKind::kTensor;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape = {};
};

// "tensor float32 [4, 3]", "bytes", "counter": how messages name what a rank registered.
std::string describe(const EntryLayout& entry);

// A rank's block for the layout allgather: its commit count and its layout (sorted by key here,
// whatever the order of `layout`), length-prefixed so that keys may hold any bytes.
std::string encode_block(int64_t commits, const std::vector<EntryLayout>& layout);

// What a block says, in descriptions (describe()) per key, sorted by key.
struct DecodedBlock {
  int64_t commits = 0;
  std::vector<std::pair<std::string, std::string>> entries;
};
// Internal naming `rank` when the block is malformed (truncated, trailing bytes, keys not in
// strictly increasing order): a bug, since blocks come from encode_block.
Result<DecodedBlock> decode_block(const std::string& block, int rank);

// OK when every rank's entries are equal; else Mismatch naming the State, the first key (in
// sorted order) that differs, what each group of ranks registered under it ("nothing" when a
// rank did not register it) and how many keys differ in all. Every rank calls this on the same
// blocks, so every rank fails with the same message.
Status check_layouts(const std::string& state_name, const std::vector<DecodedBlock>& blocks);

// Where each entry's bytes sit in the snapshot buffer (Note [State layout]): tensors first, each
// at a 64-byte aligned offset, then the counters, 8 bytes each; byte strings are kept apart (their
// length changes). `offsets` has one element per entry of `layout` (0 for byte strings).
struct Placement {
  std::vector<size_t> offsets;
  size_t total_bytes = 0;
};
Placement place(const std::vector<EntryLayout>& layout);

}  // namespace kolo::elastic
