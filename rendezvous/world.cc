#include "rendezvous/world.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>

#include "common/knobs.h"
#include "rendezvous/address.h"
#include "rendezvous/elastic_world.h"
#include "rendezvous/memory_store.h"

namespace kolo {
namespace {

Status invalid(KnobId id, int64_t value, const std::string& expected) {
  return Status::InvalidArgument(std::string(knob(id).name) + "=" + std::to_string(value) +
                                 " is invalid: expected " + expected);
}

// The value of a launcher-set integer (the registry checked its syntax and its own bounds).
Result<int> launcher_int(const KnobSet& knobs, KnobId id, std::optional<int> fallback,
                         const std::string& expected) {
  if (knobs.is_set(id)) return static_cast<int>(knobs.integer(id));
  if (fallback) return *fallback;
  return Status::InvalidArgument(std::string(knob(id).name) + " is not set: expected " + expected +
                                 " (kolorun sets it)");
}

}  // namespace

bool launched_by_kolorun(const KnobSet& knobs) {
  return knobs.is_set(KnobId::kRank) || knobs.is_set(KnobId::kElasticWorker);
}

std::string launcher_exit_key(int rank) { return "kolorun/exit/" + std::to_string(rank); }

Result<std::string> read_secret_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Status::InvalidArgument(what + " " + path + ": " + std::strerror(errno));
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument(what + " " + path + " has mode " + mode +
                                   ": other users may read it; make it private with chmod 600 " +
                                   path);
  }
  std::ifstream in(path, std::ios::binary);
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof())
    return Status::InvalidArgument(what + " " + path + ": cannot read it");
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
    secret.pop_back();  // the newline of `echo S > file`
  if (secret.empty())
    return Status::InvalidArgument(what + " " + path + " is empty: expected the job secret");
  return secret;
}

std::string random_secret() {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 4; ++i) {
    uint32_t word = rd();
    for (int j = 0; j < 8; ++j) out += kHex[(word >> (4 * j)) & 15];
  }
  return out;
}

namespace {

// The client of the store at KOLO_STORE_ADDR. The same bound for the connect and for each
// reply: a node 0 that never comes, or that stops answering, costs this rank what the user gave
// kolorun --timeout, not a constant.
Result<std::unique_ptr<Store>> connect_store(const KnobSet& knobs, const std::string& secret) {
  const std::string& addr = knobs.text(KnobId::kStoreAddr);
  KOLO_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(addr, "KOLO_STORE_ADDR"));
  if (hp.port == 0)
    return Status::InvalidArgument("KOLO_STORE_ADDR=" + addr +
                                   " is invalid: expected HOST:PORT with a port in 1..65535");
  const std::chrono::milliseconds bound = rendezvous_timeout(knobs);
  auto store = TcpStore::connect(hp, secret, bound, bound);
  if (!store.ok()) return with_rendezvous_timeout_hint(store.status(), knobs);
  return std::unique_ptr<Store>(std::move(*store));
}

// An elastic worker's world: the coordinates of the newest generation after `last_generation`
// that names it (Note [Elastic rendezvous] in elastic_plan.h).
Result<World> elastic_world(const KnobSet& knobs, int64_t last_generation) {
  const int64_t worker = knobs.integer(KnobId::kElasticWorker);
  const std::string what = "KOLO_ELASTIC_WORKER=" + std::to_string(worker);
  if (knobs.is_set(KnobId::kRank))
    return Status::InvalidArgument(what + " and KOLO_RANK=" + knobs.raw(KnobId::kRank) +
                                   " are both set: an elastic worker's rank comes from its "
                                   "generation of the world; unset one of them");
  for (KnobId needed : {KnobId::kStoreAddr, KnobId::kSecret})
    if (knobs.text(needed).empty())
      return Status::InvalidArgument(std::string(knob(needed).name) +
                                     " is not set: an elastic "
                                     "worker (" +
                                     what + ") needs it (kolorun sets it)");
  World w;
  w.secret = knobs.text(KnobId::kSecret);
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, connect_store(knobs, w.secret));
  Result<elastic_protocol::Plan> plan =
      elastic_protocol::join_generation(*store, worker, last_generation, rendezvous_timeout(knobs));
  if (!plan.ok()) return with_rendezvous_timeout_hint(plan.status(), knobs);
  const int rank = *plan->rank_of(worker);
  const elastic_protocol::PlanMember& me = plan->members[rank];
  w.rank = rank;
  w.size = plan->size();
  w.local_rank = me.local_rank;
  w.local_size = me.local_size;
  w.cross_rank = me.cross_rank;
  w.cross_size = me.cross_size;
  w.generation = plan->generation;
  for (const elastic_protocol::PlanMember& m : plan->members) w.workers.push_back(m.worker);
  w.store = std::make_unique<elastic_protocol::GenerationWatch>(std::move(store), w.generation);
  return w;
}

}  // namespace

Result<World> world_from_knobs(const KnobSet& knobs, int64_t last_generation) {
  if (knobs.is_set(KnobId::kElasticWorker)) return elastic_world(knobs, last_generation);
  World w;
  const std::string& secret = knobs.text(KnobId::kSecret);
  if (!knobs.is_set(KnobId::kRank)) {
    for (KnobId other : {KnobId::kSize, KnobId::kLocalRank, KnobId::kCrossRank}) {
      if (knobs.is_set(other)) {
        const std::string name(knob(other).name);
        return Status::InvalidArgument(name + "=" + knobs.raw(other) +
                                       " is set but KOLO_RANK is not: set KOLO_RANK (an integer "
                                       "in [0, KOLO_SIZE)) too, or unset " +
                                       name);
      }
    }
    w.store = std::make_unique<MemoryStore>();
    w.secret = secret.empty() ? random_secret() : secret;
    return w;
  }
  KOLO_ASSIGN_OR_RETURN(w.size, launcher_int(knobs, KnobId::kSize, std::nullopt, "an integer > 0"));
  const std::string below_size = "an integer in [0, KOLO_SIZE=" + std::to_string(w.size) + ")";
  w.rank = static_cast<int>(knobs.integer(KnobId::kRank));
  if (w.rank >= w.size) return invalid(KnobId::kRank, w.rank, below_size);

  const std::string up_to_size = "an integer in [1, KOLO_SIZE=" + std::to_string(w.size) + "]";
  KOLO_ASSIGN_OR_RETURN(w.local_size, launcher_int(knobs, KnobId::kLocalSize, w.size, up_to_size));
  if (w.local_size > w.size) return invalid(KnobId::kLocalSize, w.local_size, up_to_size);
  const std::string below_local =
      "an integer in [0, KOLO_LOCAL_SIZE=" + std::to_string(w.local_size) + ")";
  KOLO_ASSIGN_OR_RETURN(
      w.local_rank, launcher_int(knobs, KnobId::kLocalRank,
                                 w.local_size == w.size ? std::optional<int>(w.rank) : std::nullopt,
                                 below_local));
  if (w.local_rank >= w.local_size) return invalid(KnobId::kLocalRank, w.local_rank, below_local);

  KOLO_ASSIGN_OR_RETURN(w.cross_size, launcher_int(knobs, KnobId::kCrossSize, 1, up_to_size));
  if (w.cross_size > w.size) return invalid(KnobId::kCrossSize, w.cross_size, up_to_size);
  const std::string below_cross =
      "an integer in [0, KOLO_CROSS_SIZE=" + std::to_string(w.cross_size) + ")";
  KOLO_ASSIGN_OR_RETURN(w.cross_rank, launcher_int(knobs, KnobId::kCrossRank, 0, below_cross));
  if (w.cross_rank >= w.cross_size) return invalid(KnobId::kCrossRank, w.cross_rank, below_cross);

  if (w.size > 1 && secret.empty())
    return Status::InvalidArgument(
        "KOLO_SECRET is not set: expected the job's shared secret (a non-empty string, e.g. 32 "
        "hex digits; kolorun sets it) when KOLO_SIZE=" +
        std::to_string(w.size) + " > 1");
  w.secret = secret.empty() ? random_secret() : secret;

  const std::string& addr = knobs.text(KnobId::kStoreAddr);
  if (addr.empty()) {
    if (w.size > 1)
      return Status::InvalidArgument(
          "KOLO_STORE_ADDR is not set: expected HOST:PORT of the "
          "rendezvous store (kolorun sets it) when KOLO_SIZE=" +
          std::to_string(w.size) + " > 1");
    w.store = std::make_unique<MemoryStore>();
    return w;
  }
  KOLO_ASSIGN_OR_RETURN(w.store, connect_store(knobs, w.secret));
  return w;
}
std::chrono::milliseconds rendezvous_timeout(const KnobSet& knobs) {
  return std::chrono::ceil<std::chrono::milliseconds>(knobs.duration(KnobId::kRendezvousTimeout));
}

Status with_rendezvous_timeout_hint(const Status& st, const KnobSet& knobs) {
  if (st.code() != StatusCode::kTimeout && st.code() != StatusCode::kIoError) return st;
  return Status(st.code(), st.message() + "; " +
                               std::string(knob(KnobId::kRendezvousTimeout).name) + "=" +
                               knobs.raw(knob(KnobId::kRendezvousTimeout)) +
                               " bounds each wait of the rendezvous (kolorun --timeout DUR "
                               "sets it)");
}

}  // namespace kolo
