// Host discovery for elastic jobs: kolorun --host-discovery-script PATH runs PATH every
// --discovery-interval and starts or stops workers to follow the slots it lists (Horovod's
// format: one "host:slots" or "host" line per host, blank lines allowed).
//
// The script runs in a process group of its own with stdin /dev/null and kolorun's stderr; a run
// that outlives --discovery-timeout is killed (its whole group) and reported. Its output is read
// in full before it is parsed, so a half-printed list is never taken for the world.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "kolo/status.h"

namespace kolo::kolorun {

struct HostSlots {
  std::string host;
  int slots = 1;
  bool operator==(const HostSlots&) const = default;
};

// Parses the script's stdout. InvalidArgument naming the script, the line (number and text) and
// what was expected, for a line that is not "host" or "host:slots" (slots an integer >= 0), and
// for a host named twice (naming the line that named it first).
Result<std::vector<HostSlots>> parse_hosts(std::string_view output, const std::string& script);

// Runs the script once and parses what it printed. Errors name the script: IoError when it
// cannot be started; Timeout when it ran longer than `timeout` (it was killed); InvalidArgument
// for an exit other than 0 or an output parse_hosts refuses. Returns early with Aborted once
// `stop` is set (the script is killed). Thread-safe (no shared state).
Result<std::vector<HostSlots>> run_discovery(const std::string& script,
                                             std::chrono::milliseconds timeout,
                                             const std::atomic<bool>* stop = nullptr);

// This host's share of a discovered list: the slots of the names that mean this host
// (localhost, 127.0.0.1, `hostname` and its first label), and the other hosts, in order.
struct LocalShare {
  int slots = 0;
  std::vector<std::string> other_hosts;
};
LocalShare local_share(const std::vector<HostSlots>& hosts, const std::string& hostname);

// This machine's host name (gethostname), "localhost" when it has none.
std::string this_hostname();

// Runs the script every `interval` on a thread of its own, the first run after one interval
// (kolorun ran the first itself, before starting anything). take() hands the supervision loop
// each finished run's result once. Thread-safe; the destructor stops the thread, killing a run in
// progress.
class HostDiscovery {
 public:
  HostDiscovery(std::string script, std::chrono::milliseconds interval,
                std::chrono::milliseconds timeout);
  ~HostDiscovery();
  HostDiscovery(const HostDiscovery&) = delete;
  HostDiscovery& operator=(const HostDiscovery&) = delete;

  // The result of the newest run finished since the last call; nullopt when none has.
  std::optional<Result<std::vector<HostSlots>>> take();

 private:
  void run();

  const std::string script_;
  const std::chrono::milliseconds interval_, timeout_;
  std::atomic<bool> stop_{false};
  Mutex mu_;
  std::condition_variable wake_;
  std::optional<Result<std::vector<HostSlots>>> latest_ KOLO_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kolo::kolorun
