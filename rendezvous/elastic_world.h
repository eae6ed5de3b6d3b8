// The ranks' side of the elastic rendezvous (Note [Elastic rendezvous] in elastic_plan.h):
// joining a generation of the world, and the store watch that ends a generation's waits once
// kolorun has superseded it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kolo/status.h"
#include "rendezvous/elastic_plan.h"
#include "rendezvous/store.h"

namespace kolo::elastic_protocol {

// A Store for the sessions of generation `generation`: every call goes to `inner`, and a
// get() or wait() that would block waits in short slices, between which it looks at
// kGenerationKey and kEndKey. Once the generation is superseded it fails with Aborted
// ("generation 3 was superseded by generation 4 while waiting for ...": kolo::init() then joins
// the newer one); once the job has ended, with Aborted carrying kolorun's message. So a
// member that died before its generation connected costs the others one kolorun reaction, not
// a timeout. Thread-safe as `inner` is; owns it.
class GenerationWatch : public Store {
 public:
  GenerationWatch(std::unique_ptr<Store> inner, int64_t generation);
  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Result<bool> check(const std::string& key) override;

  Store& inner() { return *inner_; }

 private:
  // Ok while generation_ is the newest and the job goes on; else why waiting is over.
  Status still_current(const std::string& waiting_for);
  const std::unique_ptr<Store> inner_;
  const int64_t generation_;
};

// Whether `st` is GenerationWatch's Aborted "superseded", or an error that carries its message.
bool is_superseded(const Status& st);

// The newest generation kolorun has published (kGenerationKey), or -1 before generation 0's
// plan is there. Errors: the store's.
Result<int64_t> newest_generation(Store& store);

// Waits for the newest generation after `after` (-1: any) that names `worker`, and returns its
// plan. A worker that was a member before (after >= 0) and finds no newer generation asks
// kolorun for one (reform_key(after)); a new worker (after == -1) not yet named sets
// ready_key(worker) and waits to be admitted. Polls the store every few milliseconds.
// Errors: Aborted with kolorun's message once kEndKey is set; PeerFailure when a newer
// generation leaves out a worker that was a member ("worker 2 is not a member of generation
// 3 ..."); Timeout after `timeout` naming the generation waited for; InvalidArgument for a plan
// that does not parse; the store's errors.
Result<Plan> join_generation(Store& store, int64_t worker, int64_t after,
                             std::chrono::milliseconds timeout);

}  // namespace kolo::elastic_protocol
