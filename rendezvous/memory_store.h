// MemoryStore: a Store inside one process (a map under a mutex). It serves the single-rank world
// that kolo::world_from_knobs() returns without kolorun, and unit tests that run ranks as threads.
// Thread-safe; blocking calls wait on a condition variable (no polling).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "common/thread_annotations.h"
#include "rendezvous/store.h"

namespace kolo {

class MemoryStore : public Store {
 public:
  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Result<bool> check(const std::string& key) override;

 private:
  Mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_ KOLO_GUARDED_BY(mu_);
};

}  // namespace kolo
