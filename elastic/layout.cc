#include "elastic/layout.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "kolo/tensor.h"

namespace kolo::elastic {

namespace {

void put_int(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

void put_string(std::string& out, const std::string& s) {
  put_int(out, static_cast<int64_t>(s.size()));
  out += s;
}

// Reads a block written by encode_block; every read is bounds-checked.
class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  bool get_int(int64_t& v) {
    if (s_.size() - at_ < 8) return false;
    std::memcpy(&v, s_.data() + at_, 8);
    at_ += 8;
    return true;
  }
  bool get_string(std::string& out) {
    int64_t n = 0;
    if (!get_int(n) || n < 0 || static_cast<uint64_t>(n) > s_.size() - at_) return false;
    out.assign(s_.data() + at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return true;
  }
  bool done() const { return at_ == s_.size(); }

 private:
  const std::string& s_;
  size_t at_ = 0;
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// What `block` registered under `key`, or "nothing".
std::string entry_of(const DecodedBlock& block, const std::string& key) {
  auto it = std::lower_bound(block.entries.begin(), block.entries.end(), key,
                             [](const auto& e, const std::string& k) { return e.first < k; });
  return it != block.entries.end() && it->first == key ? it->second : "nothing";
}

// "rank 0, 2 registered tensor float32 [4]; rank 1 registered nothing", groups in the order of
// their first rank.
std::string who_registered_what(const std::vector<DecodedBlock>& blocks, const std::string& key) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(blocks.size()); ++r) {
    const std::string what = entry_of(blocks[r], key);
    auto g =
        std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == what; });
    if (g == groups.end()) g = groups.insert(groups.end(), {what, {}});
    g->second.push_back(r);
  }
  std::string out;
  for (const auto& [what, ranks] : groups)
    out += (out.empty() ? "" : "; ") + rank_list(ranks) + " registered " + what;
  return out;
}

}  // namespace

std::string describe(const EntryLayout& entry) {
  switch (entry.kind) {
    case EntryKind::kTensor:
      return "tensor " + std::string(dtype_name(entry.dtype)) + " " + shape_string(entry.shape);
    case EntryKind::kBytes:
      return "bytes";
    case EntryKind::kCounter:
      return "counter";
  }
  return "unknown";
}

std::string encode_block(int64_t commits, const std::vector<EntryLayout>& layout) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const EntryLayout& e : layout) entries.emplace_back(e.key, describe(e));
  std::sort(entries.begin(), entries.end());
  std::string out;
  put_int(out, commits);
  put_int(out, static_cast<int64_t>(entries.size()));
  for (const auto& [key, what] : entries) {
    put_string(out, key);
    put_string(out, what);
  }
  return out;
}

Result<DecodedBlock> decode_block(const std::string& block, int rank) {
  Reader in(block);
  DecodedBlock out;
  int64_t n = 0;
  bool good = in.get_int(out.commits) && in.get_int(n) && n >= 0;
  for (int64_t i = 0; good && i < n; ++i) {
    std::pair<std::string, std::string> entry;
    good = in.get_string(entry.first) && in.get_string(entry.second);
    out.entries.push_back(std::move(entry));
  }
  const auto unordered = [](const auto& a, const auto& b) { return a.first >= b.first; };
  if (!good || !in.done() ||
      std::adjacent_find(out.entries.begin(), out.entries.end(), unordered) != out.entries.end())
    return Status::Internal("elastic: malformed layout block from rank " + std::to_string(rank) +
                            " (" + std::to_string(block.size()) + " bytes)");
  return out;
}

Status check_layouts(const std::string& state_name, const std::vector<DecodedBlock>& blocks) {
  std::map<std::string, bool> keys;  // every key any rank registered -> whether ranks differ
  for (const DecodedBlock& b : blocks)
    for (const auto& entry : b.entries) keys.emplace(entry.first, false);
  std::string first;
  int differing = 0;
  for (auto& [key, differs] : keys) {
    const std::string what = entry_of(blocks.front(), key);
    for (const DecodedBlock& b : blocks) differs = differs || entry_of(b, key) != what;
    if (!differs) continue;
    if (differing++ == 0) first = key;
  }
  if (differing == 0) return Status::Ok();
  return Status::Mismatch(
      "elastic::State '" + state_name + "': the ranks registered different entries: key '" + first +
      "': " + who_registered_what(blocks, first) +
      (differing > 1 ? " (and " + std::to_string(differing - 1) + " more keys differ)" : "") +
      ". Every rank must register the same keys with the same kinds, dtypes and shapes");
}

Placement place(const std::vector<EntryLayout>& layout) {
  constexpr size_t kAlign = 64;
  Placement p;
  p.offsets.assign(layout.size(), 0);
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].kind != EntryKind::kTensor) continue;
    int64_t elements = 1;
    for (int64_t d : layout[i].shape) elements *= d;
    p.total_bytes = (p.total_bytes + kAlign - 1) / kAlign * kAlign;
    p.offsets[i] = p.total_bytes;
    p.total_bytes += static_cast<size_t>(elements) * dtype_size(layout[i].dtype);
  }
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].kind != EntryKind::kCounter) continue;
    p.total_bytes = (p.total_bytes + 7) / 8 * 8;
    p.offsets[i] = p.total_bytes;
    p.total_bytes += sizeof(int64_t);
  }
  return p;
}

}  // namespace kolo::elastic
