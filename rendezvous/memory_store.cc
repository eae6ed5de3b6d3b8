#include "rendezvous/memory_store.h"

#include "rendezvous/store_common.h"

namespace kolo {

using namespace store_internal;

Status MemoryStore::set(const std::string& key, const std::string& value) {
  KOLO_RETURN_IF_ERROR(validate_key("store set", key));
  KOLO_RETURN_IF_ERROR(validate_value("store set", key, value));
  {
    MutexLock lock(mu_);
    data_[key] = value;
  }
  changed_.notify_all();
  return Status::Ok();
}

Result<std::string> MemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  KOLO_RETURN_IF_ERROR(validate_key("store get", key));
  KOLO_RETURN_IF_ERROR(validate_timeout("store get", timeout));
  MutexLock lock(mu_);
  if (!changed_.wait_for(lock.native(), timeout,
                         [&]() KOLO_REQUIRES(mu_) { return data_.count(key) > 0; }))
    return missing_keys_timeout("get", timeout, {key});
  return data_.at(key);
}

Status MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const auto& k : keys) KOLO_RETURN_IF_ERROR(validate_key("store wait", k));
  KOLO_RETURN_IF_ERROR(validate_timeout("store wait", timeout));
  auto all_present = [&]() KOLO_REQUIRES(mu_) {
    for (const auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  };
  MutexLock lock(mu_);
  if (changed_.wait_for(lock.native(), timeout, all_present)) return Status::Ok();
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!data_.count(k)) missing.push_back(k);
  return missing_keys_timeout("wait", timeout, missing);
}

Result<int64_t> MemoryStore::add(const std::string& key, int64_t delta) {
  KOLO_RETURN_IF_ERROR(validate_key("store add", key));
  int64_t next = 0;
  {
    MutexLock lock(mu_);
    int64_t current = 0;
    auto it = data_.find(key);
    if (it != data_.end()) {
      KOLO_ASSIGN_OR_RETURN(current, parse_counter(key, it->second));
    }
    KOLO_ASSIGN_OR_RETURN(next, checked_add(key, current, delta));
    data_[key] = std::to_string(next);
  }
  changed_.notify_all();
  return next;
}

Result<bool> MemoryStore::check(const std::string& key) {
  KOLO_RETURN_IF_ERROR(validate_key("store check", key));
  MutexLock lock(mu_);
  return data_.count(key) > 0;
}

}  // namespace kolo
