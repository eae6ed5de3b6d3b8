#include "rendezvous/world.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <random>

#include "rendezvous/address.h"
#include "rendezvous/memory_store.h"

namespace kolo {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

Status invalid(const char* name, const std::string& value, const std::string& expected) {
  return Status::InvalidArgument(std::string(name) + "=" + value + " is invalid: expected " +
                                 expected);
}

// Reads an integer variable; `fallback` when unset, error when unset and fallback is empty.
Result<int> read_int(const char* name, std::optional<int> fallback, const std::string& expected) {
  auto v = env(name);
  if (!v) {
    if (fallback) return *fallback;
    return Status::InvalidArgument(std::string(name) + " is not set: expected " + expected +
                                   " (kolorun sets it)");
  }
  int out = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (v->empty() || ec != std::errc() || end != v->data() + v->size())
    return invalid(name, *v, expected);
  return out;
}

}  // namespace

bool launched_by_kolorun() { return std::getenv("KOLO_RANK") != nullptr; }

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

Result<World> world_from_env() {
  World w;
  if (!launched_by_kolorun()) {
    for (const char* other : {"KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_CROSS_RANK"}) {
      if (auto v = env(other))
        return Status::InvalidArgument(std::string(other) + "=" + *v +
                                       " is set but KOLO_RANK is not: set KOLO_RANK (an integer "
                                       "in [0, KOLO_SIZE)) too, or unset " +
                                       other);
    }
    w.store = std::make_unique<MemoryStore>();
    w.secret = env("KOLO_SECRET").value_or(random_secret());
    return w;
  }
  KOLO_ASSIGN_OR_RETURN(w.size, read_int("KOLO_SIZE", std::nullopt, "a positive integer"));
  if (w.size < 1) return invalid("KOLO_SIZE", std::to_string(w.size), "a positive integer");
  const std::string below_size = "an integer in [0, KOLO_SIZE=" + std::to_string(w.size) + ")";
  KOLO_ASSIGN_OR_RETURN(w.rank, read_int("KOLO_RANK", std::nullopt, below_size));
  if (w.rank < 0 || w.rank >= w.size)
    return invalid("KOLO_RANK", std::to_string(w.rank), below_size);

  KOLO_ASSIGN_OR_RETURN(w.local_size,
                        read_int("KOLO_LOCAL_SIZE", w.size,
                                 "an integer in [1, KOLO_SIZE=" + std::to_string(w.size) + "]"));
  if (w.local_size < 1 || w.local_size > w.size)
    return invalid("KOLO_LOCAL_SIZE", std::to_string(w.local_size),
                   "an integer in [1, KOLO_SIZE=" + std::to_string(w.size) + "]");
  const std::string below_local =
      "an integer in [0, KOLO_LOCAL_SIZE=" + std::to_string(w.local_size) + ")";
  KOLO_ASSIGN_OR_RETURN(
      w.local_rank,
      read_int("KOLO_LOCAL_RANK",
               w.local_size == w.size ? std::optional<int>(w.rank) : std::nullopt, below_local));
  if (w.local_rank < 0 || w.local_rank >= w.local_size)
    return invalid("KOLO_LOCAL_RANK", std::to_string(w.local_rank), below_local);

  KOLO_ASSIGN_OR_RETURN(w.cross_size,
                        read_int("KOLO_CROSS_SIZE", 1,
                                 "an integer in [1, KOLO_SIZE=" + std::to_string(w.size) + "]"));
  if (w.cross_size < 1 || w.cross_size > w.size)
    return invalid("KOLO_CROSS_SIZE", std::to_string(w.cross_size),
                   "an integer in [1, KOLO_SIZE=" + std::to_string(w.size) + "]");
  const std::string below_cross =
      "an integer in [0, KOLO_CROSS_SIZE=" + std::to_string(w.cross_size) + ")";
  KOLO_ASSIGN_OR_RETURN(w.cross_rank, read_int("KOLO_CROSS_RANK", 0, below_cross));
  if (w.cross_rank < 0 || w.cross_rank >= w.cross_size)
    return invalid("KOLO_CROSS_RANK", std::to_string(w.cross_rank), below_cross);

  auto secret = env("KOLO_SECRET");
  if (w.size > 1 && (!secret || secret->empty()))
    return Status::InvalidArgument(
        std::string("KOLO_SECRET is ") + (secret ? "empty" : "not set") +
        ": expected the job's shared secret (a non-empty string, e.g. 32 hex digits; kolorun "
        "sets it) when KOLO_SIZE=" +
        std::to_string(w.size) + " > 1");
  w.secret = secret && !secret->empty() ? *secret : random_secret();

  auto addr = env("KOLO_STORE_ADDR");
  if (!addr) {
    if (w.size > 1)
      return Status::InvalidArgument(
          "KOLO_STORE_ADDR is not set: expected HOST:PORT of the "
          "rendezvous store (kolorun sets it) when KOLO_SIZE=" +
          std::to_string(w.size) + " > 1");
    w.store = std::make_unique<MemoryStore>();
    return w;
  }
  KOLO_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(*addr, "KOLO_STORE_ADDR"));
  if (hp.port == 0) return invalid("KOLO_STORE_ADDR", *addr, "HOST:PORT with a port in 1..65535");
  KOLO_ASSIGN_OR_RETURN(auto store, TcpStore::connect(hp, std::chrono::seconds(30)));
  w.store = std::move(store);
  return w;
}

}  // namespace kolo
