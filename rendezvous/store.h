// Store: the key-value rendezvous that bootstraps every backend (addresses, ports, counters).
// Implementations: TcpStore (a client of the server that kolorun runs, see tcp_store.h) and
// FileStore (a shared directory, for tests and shared file systems); MemoryStore (one process:
// the single-rank world and thread-based tests).
//
// Keys are UTF-8 strings without NUL; values are arbitrary bytes. Keys are never deleted
// during a job. Thread-safe: any thread may call any method concurrently.
// Every blocking call takes a timeout; when it passes, the call returns Timeout naming the
// keys still missing.
// Counters: add() keeps the integer as decimal ASCII text ("3", "-12"), so get() of a counter
// returns that text; add() on a key whose value is not a decimal int64 returns InvalidArgument.
// Transport failures (a lost server, an unwritable directory) return IoError.
// Limits every implementation accepts: keys up to kMaxStoreKeyBytes, values up to
// kMaxStoreValueBytes; longer ones are InvalidArgument.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo {

inline constexpr size_t kMaxStoreKeyBytes = 4096;
inline constexpr size_t kMaxStoreValueBytes = size_t{64} << 20;  // 64 MiB

class Store {
 public:
  virtual ~Store() = default;

  // Sets (or overwrites) key.
  virtual Status set(const std::string& key, const std::string& value) = 0;
  // Waits until key exists, then returns its value.
  virtual Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Waits until every key exists. The Timeout message lists the keys still missing.
  virtual Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer stored at key (a missing key counts as 0) and
  // returns the new value.
  virtual Result<int64_t> add(const std::string& key, int64_t delta) = 0;
  // Returns whether key exists now, without waiting.
  virtual Result<bool> check(const std::string& key) = 0;
};

}  // namespace kolo
