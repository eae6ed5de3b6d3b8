#include "rendezvous/barrier.h"

#include <vector>

#include "rendezvous/store_common.h"

namespace kolo {

Status rendezvous_barrier(Store& store, const std::string& prefix, int rank, int size,
                          std::chrono::milliseconds timeout, std::string_view members) {
  if (size < 1)
    return Status::InvalidArgument("rendezvous_barrier: size must be >= 1, got " +
                                   std::to_string(size));
  if (rank < 0 || rank >= size)
    return Status::InvalidArgument("rendezvous_barrier: rank must be in [0, " +
                                   std::to_string(size) + "), got " + std::to_string(rank));
  auto key = [&](int r) { return prefix + "/arrived/" + std::to_string(r); };
  KOLO_RETURN_IF_ERROR(store.set(key(rank), "1"));
  std::vector<std::string> keys;
  keys.reserve(size);
  for (int r = 0; r < size; ++r) keys.push_back(key(r));
  Status s = store.wait(keys, timeout);
  if (s.ok() || s.code() != StatusCode::kTimeout) return s;

  // Ask again which members are missing: the wait's message names keys, people want ranks.
  std::string missing;
  int count = 0;
  for (int r = 0; r < size; ++r) {
    KOLO_ASSIGN_OR_RETURN(bool here, store.check(key(r)));
    if (here) continue;
    if (count++) missing += ", ";
    missing += std::to_string(r);
  }
  if (count == 0) return Status::Ok();  // the last one arrived just after the timeout
  std::string noun(members);
  if (count == 1 && !noun.empty() && noun.back() == 's') noun.pop_back();
  return Status::Timeout("rendezvous timed out after " + store_internal::format_ms(timeout) + ": " +
                         noun + " " + missing + " of " + std::to_string(size) + " never arrived");
}

}  // namespace kolo
