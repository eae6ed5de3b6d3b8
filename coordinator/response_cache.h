// ResponseCache: remembers the responses of recently executed names so that steady-state
// negotiation is one bit-vector allreduce instead of a round of requests to the coordinator.
//
// Why this works. Every rank applies the same sequence of put()/erase() calls (driven by the
// identical ordered response lists), so slot numbers agree across ranks without ever being
// sent. A rank sets bit `slot` when it has a pending request for the slot's name whose
// parameters equal the ones it used last time (its own request: allgather first dimensions
// and alltoall splits may differ per rank). When every rank's bit is set, every rank can
// rebuild the identical Response from its cache.
//
// Capacity 0 disables caching. Eviction is least-recently-used, where "use" is put().
// Not thread-safe: owned by the background thread.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/message.h"

namespace kolo::coord {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity), slots_(capacity) {}

  size_t capacity() const { return capacity_; }
  size_t size() const { return by_name_.size(); }

  // The slot holding `name` when this rank's `request` matches what it sent last time.
  std::optional<size_t> lookup(const Request& request) const;
  // Whether `name` is cached at all (with any parameters).
  bool contains(const std::string& name) const { return by_name_.count(name) > 0; }
  // The slot of `name` (any parameters), if cached.
  std::optional<size_t> slot_of(const std::string& name) const;
  const Response& response(size_t slot) const { return slots_[slot]->response; }
  const std::string* name_at(size_t slot) const;
  // One past the highest slot ever used (identical on every rank): the bit vector only
  // needs this many slots.
  size_t slot_limit() const { return next_unused_slot_; }

  // Records an executed response with a copy of this rank's own request (null for a rank that
  // had joined: its next request for the name misses). Refreshes LRU order. Returns the name
  // evicted to make room, if any. A name already cached is updated by copy-assignment, which
  // reuses its strings' and vectors' memory: in steady state a put allocates nothing.
  std::optional<std::string> put(const Response& response, const Request* mine);
  void erase(const std::string& name);

 private:
  struct Entry {
    Response response;
    std::optional<Request> mine;
    size_t slot;
    std::list<std::string>::iterator lru;
  };
  size_t capacity_;
  std::vector<Entry*> slots_;  // slot -> entry (null when free)
  std::unordered_map<std::string, Entry> by_name_;
  std::list<std::string> lru_;  // front = least recently used
  std::vector<size_t> free_slots_;
  size_t next_unused_slot_ = 0;
};

}  // namespace kolo::coord
