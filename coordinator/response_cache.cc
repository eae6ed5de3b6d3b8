#include "coordinator/response_cache.h"

namespace kolo::coord {

std::optional<size_t> ResponseCache::lookup(const Request& request) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end() || !it->second.mine || !(*it->second.mine == request))
    return std::nullopt;
  return it->second.slot;
}

std::optional<size_t> ResponseCache::slot_of(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second.slot;
}

const std::string* ResponseCache::name_at(size_t slot) const {
  if (slot >= slots_.size() || slots_[slot] == nullptr) return nullptr;
  return &slots_[slot]->response.name;
}

namespace {

void assign(std::optional<Request>& to, const Request* from) {
  if (from == nullptr)
    to.reset();
  else if (to)
    *to = *from;
  else
    to = *from;
}

}  // namespace

std::optional<std::string> ResponseCache::put(const Response& response, const Request* mine) {
  if (capacity_ == 0) return std::nullopt;
  auto it = by_name_.find(response.name);
  if (it != by_name_.end()) {
    it->second.response = response;
    assign(it->second.mine, mine);
    lru_.splice(lru_.end(), lru_, it->second.lru);
    return std::nullopt;
  }
  std::optional<std::string> evicted;
  if (by_name_.size() == capacity_) {
    evicted = lru_.front();
    erase(*evicted);
  }
  size_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = next_unused_slot_++;
  }
  lru_.push_back(response.name);
  Entry& e = by_name_[response.name];
  e.response = response;
  assign(e.mine, mine);
  e.slot = slot;
  e.lru = std::prev(lru_.end());
  slots_[slot] = &e;  // unordered_map never moves its nodes, so the pointer stays valid
  return evicted;
}

void ResponseCache::erase(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return;
  slots_[it->second.slot] = nullptr;
  free_slots_.push_back(it->second.slot);
  lru_.erase(it->second.lru);
  by_name_.erase(it);
}

}  // namespace kolo::coord
