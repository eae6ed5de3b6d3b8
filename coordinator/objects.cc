// broadcast_object / allgather_object: byte strings of any size, built on broadcast and
// allgather, so they negotiate, fail and time out like every other operation.
#include <cstring>

#include "coordinator/message.h"
#include "kolo/kolo.h"

namespace kolo {

namespace {

uint8_t* bytes_of(std::string& s) { return reinterpret_cast<uint8_t*>(s.data()); }

}  // namespace

Result<std::string> broadcast_object(std::string name, const std::string& bytes, int root,
                                     const ProcessSet& process_set) {
  // Set ranks (a non-member's rank() is -1: its first broadcast fails, naming the set).
  const int me = process_set.rank(), P = process_set.size();
  if (root < 0 || root >= P)
    return Status::InvalidArgument("broadcast_object '" + name + "': root must be a rank of " +
                                   process_set.to_string() + ", in [0, " + std::to_string(P) +
                                   "), got " + std::to_string(root));
  // Phase 1: the size, so that every rank can allocate the receive buffer.
  int64_t length = me == root ? static_cast<int64_t>(bytes.size()) : 0;
  KOLO_RETURN_IF_ERROR(broadcast(name + ".size", view_of(&length, {1}), root, process_set));
  // Phase 2: the bytes (root broadcasts from a copy: the view must be writable).
  std::string out = me == root ? bytes : std::string(static_cast<size_t>(length), '\0');
  KOLO_RETURN_IF_ERROR(broadcast(name, view_of(bytes_of(out), {length}), root, process_set));
  return out;
}

// One allgather of blocks [int64 length | bytes]: the blocks say where each rank's bytes end,
// so no separate round of sizes is needed.
Result<std::vector<std::string>> allgather_object(std::string name, const std::string& bytes,
                                                  const ProcessSet& process_set) {
  std::string block(sizeof(int64_t) + bytes.size(), '\0');
  const int64_t length = static_cast<int64_t>(bytes.size());
  std::memcpy(block.data(), &length, sizeof length);
  std::memcpy(block.data() + sizeof length, bytes.data(), bytes.size());
  KOLO_ASSIGN_OR_RETURN(
      HostTensor all,
      allgather(name, view_of(bytes_of(block), {static_cast<int64_t>(block.size())}), process_set));
  std::vector<std::string> out;
  const char* base = reinterpret_cast<const char*>(all.bytes.data());
  size_t at = 0;
  while (at < all.bytes.size()) {
    int64_t n = -1;
    if (at + sizeof n <= all.bytes.size()) std::memcpy(&n, base + at, sizeof n);
    if (n < 0 || at + sizeof n + static_cast<size_t>(n) > all.bytes.size())
      return Status::Internal("allgather_object '" + name + "': malformed block from rank " +
                              std::to_string(out.size()));
    out.emplace_back(base + at + sizeof n, static_cast<size_t>(n));
    at += sizeof n + static_cast<size_t>(n);
  }
  if (static_cast<int>(out.size()) != process_set.size())
    return Status::Internal("allgather_object '" + name + "': got " + std::to_string(out.size()) +
                            " blocks for " + std::to_string(process_set.size()) + " ranks");
  return out;
}

}  // namespace kolo
