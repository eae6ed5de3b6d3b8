#include "coordinator/pairs.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>

#include "common/logging.h"
#include "kolo/units.h"

namespace kolo::coord {

Status meet(Store& store, const std::string& key, const std::string& peer_gone_key, int peer,
            const std::function<Status()>& give_up) {
  auto gone = [&] {
    return Status::Aborted("rank " + std::to_string(peer) +
                           " ended its Kolo session (kolo::shutdown()) before its first send or "
                           "recv with this rank");
  };
  KOLO_ASSIGN_OR_RETURN(int64_t sum, store.add(key, 1));
  if (sum >= kWithdrawn) return gone();  // the peer came first, waited and withdrew
  // Waiting costs one store round trip per poll; polls thin out to one per 20 ms.
  auto pause = std::chrono::milliseconds(1);
  while (sum < 2) {
    Status why = give_up();
    if (why.ok()) {
      KOLO_ASSIGN_OR_RETURN(bool peer_gone, store.check(peer_gone_key));
      if (peer_gone) why = gone();
    }
    if (!why.ok()) {
      // Withdraw, unless the peer arrived meanwhile: it is connecting now, so this rank must
      // connect too (and may then shut the pair down).
      KOLO_ASSIGN_OR_RETURN(int64_t after, store.add(key, kWithdrawn));
      if (after == kWithdrawn + 1) return why;
      return Status::Ok();
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
    KOLO_ASSIGN_OR_RETURN(sum, store.add(key, 0));
  }
  return Status::Ok();
}

struct PairTable::Pair {
  Mutex mu;
  std::deque<std::unique_ptr<Entry>> waiting KOLO_GUARDED_BY(mu);  // until connected
  std::shared_ptr<Runtime> runtime KOLO_GUARDED_BY(mu);            // once connected
  Status failed KOLO_GUARDED_BY(mu);                               // why it could not be connected
  std::thread connector;  // started by the first submit, joined by shutdown()
};

PairTable::PairTable(std::shared_ptr<Runtime> global, Store* store, std::string prefix,
                     MakePairBackends make_backends)
    : global_(std::move(global)),
      store_(store),
      prefix_(std::move(prefix)),
      make_backends_(std::move(make_backends)),
      me_(global_->topology().rank) {}

PairTable::~PairTable() { shutdown(); }

Handle PairTable::submit(int peer, std::unique_ptr<Entry> entry) {
  Handle handle(entry->state);
  std::shared_ptr<Pair> pair;
  {
    MutexLock lock(mu_);
    if (closed_) {
      lock.unlock();
      entry->state->complete(Status::Aborted("kolo was shut down on rank " + std::to_string(me_)));
      return handle;
    }
    auto [it, created] = pairs_.try_emplace(peer);
    if (created) {
      it->second = std::make_shared<Pair>();
      it->second->connector =
          std::thread([this, peer, p = it->second.get()] { connect(peer, *p); });
    }
    pair = it->second;
  }
  // Completions run callbacks (the caller's too), so none happens under the pair's lock.
  std::shared_ptr<Runtime> runtime;
  Status failed;
  {
    MutexLock lock(pair->mu);
    if (!pair->runtime && pair->failed.ok()) {
      pair->waiting.push_back(std::move(entry));
      return handle;
    }
    runtime = pair->runtime;
    failed = pair->failed;
  }
  if (runtime) return runtime->submit(std::move(entry));
  entry->state->complete(failed);
  return handle;
}

void PairTable::connect(int peer, Pair& pair) {
  const int low = std::min(me_, peer), high = std::max(me_, peer);
  const std::string name = std::to_string(low) + "-" + std::to_string(high);
  const RuntimeConfig& base = global_->config();
  const auto start = std::chrono::steady_clock::now();
  bool warned = false;
  // Waiting for the peer's first send or recv is a stall like a collective's: warned about
  // after KOLO_STALL_CHECK_TIME, failed after KOLO_STALL_SHUTDOWN_TIME when that is set.
  auto give_up = [&]() -> Status {
    if (stopping_.load())
      return Status::Aborted("kolo was shut down on rank " + std::to_string(me_));
    // The job failed (a peer died, say): the peer may never come.
    if (Status failed = global_->failure(); !failed.ok()) return failed;
    const auto waited = std::chrono::steady_clock::now() - start;
    const std::string stall = "stall: rank " + std::to_string(me_) + " has waited " +
                              format_duration(waited) + " for rank " + std::to_string(peer) +
                              "'s first send or recv with it";
    if (base.stall_shutdown_time.count() > 0 && waited >= base.stall_shutdown_time)
      return Status::Aborted(stall + "; KOLO_STALL_SHUTDOWN_TIME (" +
                             format_duration(base.stall_shutdown_time) + ") exceeded");
    if (!warned && base.stall_check_time.count() > 0 && waited >= base.stall_check_time) {
      warned = true;
      KOLO_LOG_WARNING(stall);
    }
    return Status::Ok();
  };
  auto connected = [&]() -> Result<std::shared_ptr<Runtime>> {
    KOLO_RETURN_IF_ERROR(meet(*store_, prefix_ + "/" + name + "/meet",
                              prefix_ + "/gone/" + std::to_string(peer), peer, give_up));
    const int pair_rank = me_ == low ? 0 : 1;
    KOLO_ASSIGN_OR_RETURN(SetBackends b, make_backends_(low, high, pair_rank));
    RuntimeConfig config = base;
    config.timeline_path.clear();  // it records on the global set's timeline; no tuner
    config.autotune.enabled = false;
    config.label =
        "the point-to-point pair of ranks " + std::to_string(low) + " and " + std::to_string(high);
    config.closed_by = "shutdown()";
    config.rank_names = {low, high};
    // A send waits for its recv, which the peer may post much later while it waits in a
    // transfer of its own: not a mismatch (RuntimeConfig::mismatch_time).
    config.mismatch_time = std::chrono::nanoseconds(0);
    if (config.describe_departure)
      config.describe_departure = [job = std::move(config.describe_departure), low, high](
                                      int pair_rank) { return job(pair_rank == 0 ? low : high); };
    Topology t;
    t.rank = pair_rank;
    t.size = 2;
    KOLO_ASSIGN_OR_RETURN(
        std::unique_ptr<Runtime> rt,
        Runtime::create(std::move(config), t, std::move(b.data), std::move(b.control),
                        std::move(b.gpu), global_->timeline_rows("pair " + name + ": ")));
    return std::shared_ptr<Runtime>(std::move(rt));
  };
  Result<std::shared_ptr<Runtime>> rt = connected();
  if (rt.ok()) {
    // The waiting entries go first, in submission order; submissions go straight to the
    // Runtime only once none waits.
    for (;;) {
      std::deque<std::unique_ptr<Entry>> batch;
      {
        MutexLock lock(pair.mu);
        if (pair.waiting.empty()) {
          pair.runtime = *rt;
          return;
        }
        batch.swap(pair.waiting);
      }
      for (auto& e : batch) (*rt)->submit(std::move(e));
    }
  }
  const Status why = rt.status().with_context("connecting ranks " + std::to_string(low) + " and " +
                                              std::to_string(high) + " for point-to-point");
  std::deque<std::unique_ptr<Entry>> failed;
  {
    MutexLock lock(pair.mu);
    pair.failed = why;
    failed.swap(pair.waiting);
  }
  for (auto& e : failed) e->state->complete(why);
}

void PairTable::shutdown() {
  std::map<int, std::shared_ptr<Pair>> pairs;
  {
    MutexLock lock(mu_);
    if (closed_) return;
    closed_ = true;
    pairs.swap(pairs_);
  }
  stopping_.store(true);
  // A peer waiting to meet this rank would otherwise wait for good. Not after the job failed:
  // the peers' own Runtimes fail too, which ends their waits, while the store may be out of
  // reach (node 0 died, the link is down) and a write would hold this process for the store's
  // I/O timeout, at exit included.
  if (global_->failure().ok()) (void)store_->set(prefix_ + "/gone/" + std::to_string(me_), "1");
  for (auto& [peer, pair] : pairs)
    if (pair->connector.joinable()) pair->connector.join();
  const Status closed = Status::Aborted("kolo was shut down on rank " + std::to_string(me_));
  for (auto& [peer, pair] : pairs) {
    std::shared_ptr<Runtime> runtime;
    std::deque<std::unique_ptr<Entry>> waiting;
    {
      MutexLock lock(pair->mu);
      runtime = std::move(pair->runtime);
      // A submission that found this pair before the table closed fails, not waits.
      if (pair->failed.ok()) pair->failed = closed;
      waiting.swap(pair->waiting);
    }
    for (auto& e : waiting) e->state->complete(closed);
    if (runtime) (void)runtime->shutdown();
  }
}

}  // namespace kolo::coord
