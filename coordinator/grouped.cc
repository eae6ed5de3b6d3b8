// Grouped allgather and reducescatter: a group of tensors packed into one buffer and run as
// one allgather or reducescatter, so the group is negotiated and executed as a single
// operation (Note [Grouped gathers] in docs/architecture.md).
//
// Allgather: each rank sends one self-describing block, [header | member bytes...], where the
// header lists the member count and each member's dtype and shape. Every rank receives the
// same blocks, so every rank reaches the same verdict on a disagreement between groups and
// reports the same Mismatch. Reducescatter: the members are reordered rank by rank, so that
// one reducescatter with caller-given receive counts leaves every rank its share of each.
#include <cstring>

#include "common/thread_annotations.h"
#include "coordinator/submit.h"
#include "kolo/kolo.h"

namespace kolo {

// ---- GroupedHandle ------------------------------------------------------------------------------

struct GroupedHandle::State {
  // Constant after construction.
  Handle packed;
  Unpack unpack;

  Mutex mu;
  bool taken KOLO_GUARDED_BY(mu) = false;  // the outputs went to a caller
};

GroupedHandle::GroupedHandle(Handle packed, Unpack unpack, std::shared_ptr<const void> keep_alive)
    : state_(std::make_shared<State>()) {
  state_->packed = packed;
  state_->unpack = std::move(unpack);
  // The packed input must outlive the operation even when the caller drops every copy.
  if (keep_alive) packed.then([keep = std::move(keep_alive)](const Status&) {});
}

const std::string& GroupedHandle::name() const {
  static const std::string kEmpty;
  return state_ ? state_->packed.name() : kEmpty;
}

bool GroupedHandle::poll() const { return state_ && state_->packed.poll(); }

Result<std::vector<HostTensor>> GroupedHandle::wait(
    std::optional<std::chrono::milliseconds> timeout) const {
  if (!state_) return Status::PreconditionFailed("empty kolo::GroupedHandle (default-constructed)");
  Status st = state_->packed.wait(timeout);
  if (!state_->packed.poll()) return st;  // timed out: still running
  if (!state_->unpack) return st;         // rejected at submission
  MutexLock lock(state_->mu);
  if (state_->taken)
    return Status::PreconditionFailed("grouped operation '" + name() +
                                      "': its outputs were already returned by wait()");
  state_->taken = true;
  return state_->unpack(state_->packed);
}

namespace {

// A group rejected on this rank: a handle that has already failed.
GroupedHandle failed(const std::string& name, Status status) {
  auto state = std::make_shared<detail::OpState>(name);
  state->complete(std::move(status));
  return GroupedHandle(Handle(state), nullptr, nullptr);
}

// Arguments that only this rank can check: a non-empty list of CPU tensors with rows.
Status check_members(coord::OpType type, const std::string& name,
                     const std::vector<TensorView>& tensors) {
  const std::string what = "grouped " + std::string(coord::op_type_name(type)) + " '" + name + "'";
  if (tensors.empty()) return Status::InvalidArgument(what + ": needs >= 1 tensor, got 0");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string member = name + "[" + std::to_string(i) + "]";
    KOLO_RETURN_IF_ERROR(coord::check_input_view(type, member, "input", tensors[i]));
    if (!tensors[i].device.is_cpu())
      return Status::Unsupported(what + ": member '" + member + "' is on " +
                                 tensors[i].device.to_string() +
                                 "; grouped gathers take CPU tensors only");
    if (tensors[i].shape.empty())
      return Status::InvalidArgument(what + ": member '" + member +
                                     "' must have at least 1 dimension, got a scalar");
  }
  return Status::Ok();
}

int64_t row_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// "rank 0 has 2; ranks [1, 2] have 3", or empty when every rank has the same value.
std::string disagreement(const std::vector<std::string>& by_rank) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& p) { return p.first == by_rank[r]; });
    if (g == groups.end())
      groups.push_back({by_rank[r], {r}});
    else
      g->second.push_back(r);
  }
  if (groups.size() <= 1) return "";
  std::string msg;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& ranks = groups[i].second;
    std::string list;
    for (size_t j = 0; j < ranks.size(); ++j) list += (j ? ", " : "") + std::to_string(ranks[j]);
    msg += (i ? "; " : "");
    msg += ranks.size() == 1 ? "rank " + list + " has " : "ranks [" + list + "] have ";
    msg += groups[i].first;
  }
  return msg;
}

// ---- Allgather blocks ---------------------------------------------------------------------------
// Block: int64 words [count, (dtype, ndims, dims...) per member], then each member's bytes.

struct Member {
  DataType dtype;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
};

std::vector<std::byte> pack_block(const std::vector<TensorView>& tensors) {
  std::vector<int64_t> header{static_cast<int64_t>(tensors.size())};
  size_t data_bytes = 0;
  for (const auto& t : tensors) {
    header.push_back(static_cast<int64_t>(t.dtype));
    header.push_back(static_cast<int64_t>(t.shape.size()));
    header.insert(header.end(), t.shape.begin(), t.shape.end());
    data_bytes += t.num_bytes();
  }
  std::vector<std::byte> block(header.size() * sizeof(int64_t) + data_bytes);
  std::memcpy(block.data(), header.data(), header.size() * sizeof(int64_t));
  size_t at = header.size() * sizeof(int64_t);
  for (const auto& t : tensors) {
    if (t.num_bytes() > 0) std::memcpy(block.data() + at, t.data, t.num_bytes());
    at += t.num_bytes();
  }
  return block;
}

// Reads one block at `at`, advancing it. The blocks were written by pack_block on every rank,
// so a malformed one is Kolo's bug (Internal).
Result<std::vector<Member>> read_block(const std::byte* base, size_t total, size_t& at,
                                       const std::string& name, int rank) {
  auto bad = [&] {
    return Status::Internal("grouped allgather '" + name + "': malformed block from rank " +
                            std::to_string(rank));
  };
  auto word = [&](int64_t& v) {
    if (at + sizeof(int64_t) > total) return false;
    std::memcpy(&v, base + at, sizeof(int64_t));
    at += sizeof(int64_t);
    return true;
  };
  int64_t count = 0;
  if (!word(count) || count < 0) return bad();
  std::vector<Member> members(static_cast<size_t>(count));
  for (auto& m : members) {
    int64_t dtype = 0, ndims = 0;
    if (!word(dtype) || !is_valid_dtype(static_cast<int>(dtype)) || !word(ndims) || ndims < 0)
      return bad();
    m.dtype = static_cast<DataType>(dtype);
    m.shape.resize(static_cast<size_t>(ndims));
    for (auto& d : m.shape)
      if (!word(d) || d < 0) return bad();
  }
  for (auto& m : members) {
    const size_t bytes = static_cast<size_t>(coord::num_elements(m.shape)) * dtype_size(m.dtype);
    if (at + bytes > total) return bad();
    m.data = base + at;
    at += bytes;
  }
  return members;
}

Result<std::vector<HostTensor>> unpack_allgather(const std::string& name, const Handle& packed) {
  KOLO_RETURN_IF_ERROR(packed.status());
  const HostTensor all = packed.take_output();
  std::vector<std::vector<Member>> blocks;
  size_t at = 0;
  for (int r = 0; at < all.bytes.size(); ++r) {
    KOLO_ASSIGN_OR_RETURN(auto block, read_block(all.bytes.data(), all.bytes.size(), at, name, r));
    blocks.push_back(std::move(block));
  }
  const std::string what = "grouped allgather '" + name + "'";
  std::vector<std::string> counts;
  for (const auto& b : blocks) counts.push_back(std::to_string(b.size()) + " tensors");
  if (std::string d = disagreement(counts); !d.empty())
    return Status::Mismatch(what + ": the number of tensors differs across ranks: " + d);
  std::vector<HostTensor> out(blocks.at(0).size());
  for (size_t k = 0; k < out.size(); ++k) {
    std::vector<std::string> sig;
    for (const auto& b : blocks) {
      std::vector<int64_t> rest(b[k].shape.begin() + (b[k].shape.empty() ? 0 : 1),
                                b[k].shape.end());
      sig.push_back(std::string(dtype_name(b[k].dtype)) + " [*" +
                    (rest.empty() ? "" : ", " + shape_string(rest).substr(1)) +
                    (rest.empty() ? "]" : ""));
    }
    if (std::string d = disagreement(sig); !d.empty())
      return Status::Mismatch(what + ": member '" + name + "[" + std::to_string(k) +
                              "]': dtype or shape beyond the first dimension differs across "
                              "ranks: " +
                              d);
    HostTensor& t = out[k];
    t.dtype = blocks[0][k].dtype;
    t.shape = blocks[0][k].shape;
    t.shape[0] = 0;
    for (const auto& b : blocks) t.shape[0] += b[k].shape[0];
    t.bytes.resize(static_cast<size_t>(t.num_elements()) * dtype_size(t.dtype));
    size_t o = 0;
    for (const auto& b : blocks) {
      const size_t n = static_cast<size_t>(coord::num_elements(b[k].shape)) * dtype_size(t.dtype);
      if (n > 0) std::memcpy(t.bytes.data() + o, b[k].data, n);
      o += n;
    }
  }
  return out;
}

// ---- Reducescatter layout -----------------------------------------------------------------------

// Rows of a member of `rows` rows that rank r receives (reducescatter's even split).
int64_t share(int64_t rows, int r, int size) { return rows / size + (r < rows % size ? 1 : 0); }

}  // namespace

GroupedHandle grouped_allgather_async(std::string name, std::vector<TensorView> tensors,
                                      const ProcessSet& process_set) {
  const coord::OpType t = coord::OpType::kAllgather;
  if (Status st = check_members(t, name, tensors); !st.ok()) return failed(name, st);
  auto block = std::make_shared<std::vector<std::byte>>(pack_block(tensors));
  Handle h = allgather_async(
      name,
      view_of(reinterpret_cast<uint8_t*>(block->data()), {static_cast<int64_t>(block->size())}),
      {.process_set = process_set});
  return GroupedHandle(
      h, [name](const Handle& packed) { return unpack_allgather(name, packed); }, block);
}

GroupedHandle grouped_reducescatter_async(std::string name, std::vector<TensorView> tensors,
                                          Reduction reduction, const ProcessSet& process_set) {
  const coord::OpType t = coord::OpType::kReducescatter;
  if (Status st = check_members(t, name, tensors); !st.ok()) return failed(name, st);
  for (size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].dtype != tensors[0].dtype)
      return failed(
          name, Status::InvalidArgument("grouped reducescatter '" + name + "': member '" + name +
                                        "[" + std::to_string(i) + "]' has dtype " +
                                        std::string(dtype_name(tensors[i].dtype)) +
                                        ", but every member " + "must have the first member's " +
                                        std::string(dtype_name(tensors[0].dtype))));
  // Ranks and shares are the set's (a non-member's submission fails below, naming the set).
  const int P = process_set.size();
  const size_t esize = dtype_size(tensors[0].dtype);
  int64_t total = 0;
  for (const auto& v : tensors) total += v.num_elements();
  auto packed = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(total) * esize);
  std::vector<int64_t> recv_counts(P, 0);
  size_t at = 0;
  std::vector<int64_t> row_offset(tensors.size(), 0);
  for (int r = 0; r < P; ++r) {
    for (size_t k = 0; k < tensors.size(); ++k) {
      const int64_t row = row_elements(tensors[k].shape);
      const int64_t rows = share(tensors[k].shape[0], r, P);
      const size_t bytes = static_cast<size_t>(rows * row) * esize;
      if (bytes > 0)
        std::memcpy(packed->data() + at,
                    static_cast<const std::byte*>(tensors[k].data) +
                        static_cast<size_t>(row_offset[k] * row) * esize,
                    bytes);
      at += bytes;
      row_offset[k] += rows;
      recv_counts[r] += rows * row;
    }
  }
  TensorView flat;  // the members' dtype, one dimension of `total` elements
  flat.data = packed->data();
  flat.shape = {total};
  flat.dtype = tensors[0].dtype;
  Handle h = reducescatter_async(
      name, flat, {.reduction = reduction, .recv_counts = recv_counts, .process_set = process_set});
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& v : tensors) shapes.push_back(v.shape);
  const int me = process_set.rank();
  auto unpack = [name, shapes, me, P](const Handle& done) -> Result<std::vector<HostTensor>> {
    if (Status st = done.status(); !st.ok()) {
      if (st.code() != StatusCode::kMismatch) return st;
      // The ranks' groups differ: say so, then what the packed operation saw.
      return Status::Mismatch("grouped reducescatter '" + name +
                              "': the members' shapes differ across ranks (they travel as "
                              "one tensor): " +
                              st.message());
    }
    const HostTensor mine = done.take_output();
    std::vector<HostTensor> out(shapes.size());
    size_t at = 0;
    for (size_t k = 0; k < shapes.size(); ++k) {
      out[k].dtype = mine.dtype;
      out[k].shape = shapes[k];
      out[k].shape[0] = share(shapes[k][0], me, P);
      out[k].bytes.resize(static_cast<size_t>(out[k].num_elements()) * dtype_size(mine.dtype));
      if (!out[k].bytes.empty())
        std::memcpy(out[k].bytes.data(), mine.bytes.data() + at, out[k].bytes.size());
      at += out[k].bytes.size();
    }
    return out;
  };
  return GroupedHandle(h, std::move(unpack), packed);
}

Result<std::vector<HostTensor>> grouped_allgather(std::string name, std::vector<TensorView> tensors,
                                                  const ProcessSet& process_set) {
  return grouped_allgather_async(std::move(name), std::move(tensors), process_set).wait();
}

Result<std::vector<HostTensor>> grouped_reducescatter(std::string name,
                                                      std::vector<TensorView> tensors,
                                                      Reduction reduction,
                                                      const ProcessSet& process_set) {
  return grouped_reducescatter_async(std::move(name), std::move(tensors), reduction, process_set)
      .wait();
}

}  // namespace kolo
