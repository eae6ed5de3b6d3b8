#include "coordinator/departures.h"

#include <utility>

#include "rendezvous/elastic_plan.h"
#include "rendezvous/world.h"

namespace kolo::coord {

Departures::Departures(std::shared_ptr<Store> store, std::string prefix, int rank,
                       std::chrono::milliseconds launcher_wait, std::vector<int64_t> workers)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      rank_(rank),
      launcher_wait_(launcher_wait),
      workers_(std::move(workers)) {}

void Departures::record() {
  if (store_) (void)store_->set(key(rank_), "1");
}

std::optional<std::string> Departures::describe(int rank) {
  if (!store_) return std::nullopt;
  Result<bool> departed = store_->check(key(rank));
  if (!departed.ok() || !*departed) return std::nullopt;
  const std::string who = "rank " + std::to_string(rank);
  if (launcher_wait_.count() > 0) {
    const std::string exit_key =
        workers_.empty() ? launcher_exit_key(rank) : elastic_protocol::exit_key(workers_.at(rank));
    Result<std::string> end = store_->get(exit_key, launcher_wait_);
    if (end.ok())
      return who + " " + *end +
             " before finishing, without calling kolo::shutdown() (it returned from main or "
             "called exit)";
  }
  return who +
         " exited without calling kolo::shutdown() (it returned from main or called exit) before "
         "finishing";
}

}  // namespace kolo::coord
