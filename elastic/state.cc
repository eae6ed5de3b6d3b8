// kolo::elastic::State (include/kolo/elastic.h): registration, commit, restore and sync, built
// on the public collectives as coordinator/objects.cc is, so they negotiate, fail and time out
// like every other operation. Note [State layout] in elastic/layout.h: why the layout is
// checked once and frozen.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "elastic/layout.h"
#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace kolo::elastic {

namespace {

// A registered key: where its live value is (one of the three, by kind).
struct Entry {
  EntryLayout layout;
  void* data = nullptr;  // a tensor's memory
  std::string* bytes = nullptr;
  int64_t* counter = nullptr;
  size_t offset = 0;  // in the snapshot buffer (tensors and counters)
  size_t blob = 0;    // index in the byte strings' snapshot
};

size_t tensor_bytes(const Entry& e) {
  int64_t n = 1;
  for (int64_t d : e.layout.shape) n *= d;
  return static_cast<size_t>(n) * dtype_size(e.layout.dtype);
}

// The byte strings as blocks of [int64 length | bytes], for one broadcast_object.
std::string pack(const std::vector<std::string>& blobs) {
  std::string out;
  for (const std::string& b : blobs) {
    const int64_t n = static_cast<int64_t>(b.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out += b;
  }
  return out;
}

Result<std::vector<std::string>> unpack(const std::string& packed, size_t count,
                                        const std::string& what) {
  std::vector<std::string> out;
  size_t at = 0;
  while (out.size() < count) {
    int64_t n = -1;
    if (packed.size() - at >= sizeof n) std::memcpy(&n, packed.data() + at, sizeof n);
    if (n < 0 || static_cast<uint64_t>(n) > packed.size() - at - sizeof n)
      return Status::Internal(what + ": malformed byte strings from the source rank");
    out.emplace_back(packed.data() + at + sizeof n, static_cast<size_t>(n));
    at += sizeof n + static_cast<size_t>(n);
  }
  if (at != packed.size()) return Status::Internal(what + ": trailing bytes from the source rank");
  return out;
}

}  // namespace

namespace detail {

class StateImpl {
 public:
  explicit StateImpl(std::string n) : name(std::move(n)), ops("elastic." + name) {}

  Status add(std::string key, Entry entry) KOLO_EXCLUDES(mu);
  Status check_initialized(const char* call) const;
  Status check_and_fix(const std::string& block_name) KOLO_REQUIRES(mu);
  void fix_layout() KOLO_REQUIRES(mu);
  void take_snapshot() KOLO_REQUIRES(mu);
  void write_back() KOLO_REQUIRES(mu);
  std::vector<EntryLayout> layout() const KOLO_REQUIRES(mu);
  Result<std::vector<DecodedBlock>> gather_blocks(const std::string& op) KOLO_REQUIRES(mu);
  Status sync() KOLO_REQUIRES(mu);

  const std::string name;
  const std::string ops;  // the prefix of this State's operation names
  mutable Mutex mu;
  std::map<std::string, Entry> entries KOLO_GUARDED_BY(mu);  // sorted: Note [State layout]
  bool fixed KOLO_GUARDED_BY(mu) = false;               // registration closed, offsets assigned
  std::vector<std::byte> snapshot KOLO_GUARDED_BY(mu);  // tensors and counters
  std::vector<std::string> blobs KOLO_GUARDED_BY(mu);   // byte strings, in key order
  int64_t commits KOLO_GUARDED_BY(mu) = 0;
  std::vector<std::function<Status()>> on_reset KOLO_GUARDED_BY(mu);
};

Status StateImpl::add(std::string key, Entry entry) {
  MutexLock lock(mu);
  const std::string where = "elastic::State '" + name + "': key '" + key + "'";
  if (key.empty())
    return Status::InvalidArgument("elastic::State '" + name + "': a key must not be empty");
  if (fixed)
    return Status::PreconditionFailed(where +
                                      " registered after the first commit() or sync(): register "
                                      "every entry before them (the layout is fixed then)");
  if (entries.count(key)) return Status::InvalidArgument(where + " is already registered");
  entry.layout.key = key;
  entries.emplace(std::move(key), std::move(entry));
  return Status::Ok();
}

Status StateImpl::check_initialized(const char* call) const {
  if (is_initialized()) return Status::Ok();
  return Status::PreconditionFailed("elastic::State '" + name + "': " + call +
                                    " before kolo::init(): it is collective and needs the job");
}

std::vector<EntryLayout> StateImpl::layout() const {
  std::vector<EntryLayout> out;
  for (const auto& [key, e] : entries) out.push_back(e.layout);
  return out;
}

// One allgather of every rank's commit count and layout (Note [State layout]).
Result<std::vector<DecodedBlock>> StateImpl::gather_blocks(const std::string& op) {
  KOLO_ASSIGN_OR_RETURN(std::vector<std::string> raw,
                        allgather_object(op, encode_block(commits, layout())));
  std::vector<DecodedBlock> blocks;
  for (size_t r = 0; r < raw.size(); ++r) {
    KOLO_ASSIGN_OR_RETURN(DecodedBlock b, decode_block(raw[r], static_cast<int>(r)));
    blocks.push_back(std::move(b));
  }
  KOLO_RETURN_IF_ERROR(check_layouts(name, blocks));
  return blocks;
}

Status StateImpl::check_and_fix(const std::string& op) {
  KOLO_RETURN_IF_ERROR(gather_blocks(op).status());
  fix_layout();
  return Status::Ok();
}

void StateImpl::fix_layout() {
  if (fixed) return;
  const Placement p = place(layout());
  size_t i = 0, blob = 0;
  for (auto& [key, e] : entries) {
    e.offset = p.offsets[i++];
    if (e.layout.kind == EntryKind::kBytes) e.blob = blob++;
  }
  snapshot.assign(p.total_bytes, std::byte{0});
  blobs.assign(blob, std::string());
  fixed = true;
}

void StateImpl::take_snapshot() {
  for (const auto& [key, e] : entries) {
    switch (e.layout.kind) {
      case EntryKind::kTensor:
        if (const size_t n = tensor_bytes(e)) std::memcpy(snapshot.data() + e.offset, e.data, n);
        break;
      case EntryKind::kCounter:
        std::memcpy(snapshot.data() + e.offset, e.counter, sizeof(int64_t));
        break;
      case EntryKind::kBytes:
        blobs[e.blob] = *e.bytes;
        break;
    }
  }
}

void StateImpl::write_back() {
  for (const auto& [key, e] : entries) {
    switch (e.layout.kind) {
      case EntryKind::kTensor:
        if (const size_t n = tensor_bytes(e)) std::memcpy(e.data, snapshot.data() + e.offset, n);
        break;
      case EntryKind::kCounter:
        std::memcpy(e.counter, snapshot.data() + e.offset, sizeof(int64_t));
        break;
      case EntryKind::kBytes:
        *e.bytes = blobs[e.blob];
        break;
    }
  }
}

// Note [Elastic sync]. The source is the lowest rank with the most commits. Every rank learns
// it from the same allgather, so all agree without another round. Receivers take the source's
// snapshot into buffers of their own and adopt them only when every transfer succeeded: a sync
// that fails (a peer lost mid-way, which is when elastic training syncs) leaves this rank's
// last commit intact for the next attempt. The source broadcasts from its snapshot, which a
// broadcast does not write on the root.
Status StateImpl::sync() {
  KOLO_ASSIGN_OR_RETURN(std::vector<DecodedBlock> blocks, gather_blocks(ops + ".sync"));
  fix_layout();
  int source = 0;
  for (int r = 1; r < static_cast<int>(blocks.size()); ++r)
    if (blocks[r].commits > blocks[source].commits) source = r;
  const int64_t newest = std::max<int64_t>(blocks[source].commits, 1);
  const bool is_source = rank() == source;
  // Nobody committed: rank 0's current values become the commit everyone takes.
  if (is_source && blocks[source].commits == 0) take_snapshot();
  std::vector<std::byte> incoming(is_source ? 0 : snapshot.size());
  std::byte* data = is_source ? snapshot.data() : incoming.data();
  if (!snapshot.empty())
    KOLO_RETURN_IF_ERROR(broadcast(
        ops + ".data",
        view_of(reinterpret_cast<uint8_t*>(data), {static_cast<int64_t>(snapshot.size())}),
        source));
  std::vector<std::string> incoming_blobs;
  if (!blobs.empty()) {
    KOLO_ASSIGN_OR_RETURN(std::string packed,
                          broadcast_object(ops + ".bytes", is_source ? pack(blobs) : "", source));
    KOLO_ASSIGN_OR_RETURN(incoming_blobs, unpack(packed, blobs.size(), ops + ".bytes"));
  }
  if (!is_source) {
    snapshot = std::move(incoming);
    blobs = std::move(incoming_blobs);
  }
  commits = newest;
  write_back();
  return Status::Ok();
}

}  // namespace detail

State::State(std::string name) : impl_(std::make_unique<detail::StateImpl>(std::move(name))) {}
State::~State() = default;

Status State::add_tensor(std::string key, TensorView tensor) {
  const std::string where = "elastic::State '" + impl_->name + "': key '" + key + "'";
  if (!tensor.device.is_cpu())
    return Status::Unsupported(where + " is a tensor on " + tensor.device.to_string() +
                               ": a State holds CPU tensors only (copy it to the host)");
  for (int64_t d : tensor.shape)
    if (d < 0)
      return Status::InvalidArgument(where + " has a negative dimension: shape " +
                                     shape_string(tensor.shape));
  if (tensor.data == nullptr && tensor.num_elements() > 0)
    return Status::InvalidArgument(where + " has null data and " +
                                   std::to_string(tensor.num_elements()) + " elements");
  Entry e;
  e.layout = {.kind = EntryKind::kTensor, .dtype = tensor.dtype, .shape = tensor.shape};
  e.data = tensor.data;
  return impl_->add(std::move(key), std::move(e));
}

Status State::add_bytes(std::string key, std::string* bytes) {
  if (bytes == nullptr)
    return Status::InvalidArgument("elastic::State '" + impl_->name + "': key '" + key +
                                   "': the byte string is a null pointer");
  Entry e;
  e.layout.kind = EntryKind::kBytes;
  e.bytes = bytes;
  return impl_->add(std::move(key), std::move(e));
}

Status State::add_counter(std::string key, int64_t* counter) {
  if (counter == nullptr)
    return Status::InvalidArgument("elastic::State '" + impl_->name + "': key '" + key +
                                   "': the counter is a null pointer");
  Entry e;
  e.layout.kind = EntryKind::kCounter;
  e.counter = counter;
  return impl_->add(std::move(key), std::move(e));
}

Status State::commit() {
  KOLO_RETURN_IF_ERROR(impl_->check_initialized("commit()"));
  MutexLock lock(impl_->mu);
  if (!impl_->fixed) KOLO_RETURN_IF_ERROR(impl_->check_and_fix(impl_->ops + ".layout"));
  impl_->take_snapshot();
  ++impl_->commits;
  // In an elastic job ranks are added only here, between steps (Note [Elastic rendezvous]).
  return check_world();
}

Status State::restore() {
  MutexLock lock(impl_->mu);
  if (impl_->commits == 0)
    return Status::PreconditionFailed("elastic::State '" + impl_->name +
                                      "': restore() before any commit() or sync()");
  impl_->write_back();
  return Status::Ok();
}

Status State::sync() {
  KOLO_RETURN_IF_ERROR(impl_->check_initialized("sync()"));
  MutexLock lock(impl_->mu);
  return impl_->sync();
}

int64_t State::commits() const {
  MutexLock lock(impl_->mu);
  return impl_->commits;
}

void State::on_reset(std::function<Status()> callback) {
  MutexLock lock(impl_->mu);
  impl_->on_reset.push_back(std::move(callback));
}

namespace detail {

Status call_reset_callbacks(State& state) {
  std::vector<std::function<Status()>> callbacks;
  {
    MutexLock lock(state.impl_->mu);
    callbacks = state.impl_->on_reset;  // called unlocked: they may use the State
  }
  for (const auto& callback : callbacks) KOLO_RETURN_IF_ERROR(callback());
  return Status::Ok();
}

}  // namespace detail

}  // namespace kolo::elastic
