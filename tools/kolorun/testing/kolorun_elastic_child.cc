// A worker program for kolorun's elastic end-to-end tests: it speaks the elastic rendezvous
// protocol (rendezvous/elastic_plan.h) directly over rendezvous::TcpStore, without the library,
// so that kolorun's side is tested alone. Usage: kolorun_elastic_child MODE [SETTING...]
//   env     print KOLO_ELASTIC_WORKER and the world variables a worker must not have, exit 0
//   follow  print "pid P", join the newest generation that names this worker (setting its ready key
//   while not
//           named), print "joined generation G as rank R of S (workers A, B)", and follow every
//           newer one, as ranks do at each commit; when kEndKey appears, print "end: MESSAGE" and
//           exit 3. Settings (W a worker id):
//     exit=W:S    worker W exits with status S once it has joined its first generation
//     fail-from=W:S  every worker from W on exits with status S once it has joined its first
//                 generation (replacements included)
//     kill=W      worker W kills itself with SIGKILL once it has joined its first generation
//     ask=W       worker W asks for a new generation (reform_key) once it has joined generation 0
//     done=A,B,C  exit 0 once joined a generation whose workers are exactly A, B, C
//     until=G     exit 0 once joined generation G or a newer one
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "rendezvous/address.h"
#include "rendezvous/elastic_plan.h"
#include "rendezvous/tcp_store.h"

namespace {

namespace ep = kolo::elastic_protocol;
using namespace std::chrono_literals;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "kolorun_elastic_child: %s\n", why.c_str());
  std::exit(99);
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// The plan's workers as "0,2,3", for done=.
std::string compact(const ep::Plan& plan) {
  std::string out;
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "," + std::to_string(..).
  for (const auto& m : plan.members) {
    if (!out.empty()) out += ',';
    out += std::to_string(m.worker);
  }
  return out;
}

class Worker {
 public:
  Worker(kolo::Store& store, int64_t id, std::map<std::string, std::string> settings)
      : store_(store), id_(id), settings_(std::move(settings)) {}

  [[noreturn]] void follow() {
    int64_t joined = -1;
    bool ready_set = false;
    while (true) {
      if (auto end = store_.check(ep::kEndKey); end.ok() && *end) {
        auto message = store_.get(ep::kEndKey, 1s);
        say("end: " + (message.ok() ? *message : std::string("?")));
        std::exit(3);
      }
      auto newest = store_.add(ep::kGenerationKey, 0);
      if (!newest.ok()) die("store: " + newest.status().message());
      if (*newest > joined) {
        auto text = store_.get(ep::plan_key(*newest), 1s);
        if (!text.ok()) die("no plan of generation " + std::to_string(*newest));
        auto plan = ep::Plan::parse(*text);
        if (!plan.ok()) die(plan.status().message());
        if (auto rank = plan->rank_of(id_)) {
          joined = *newest;
          joined_(*plan, *rank);
        } else if (!ready_set && joined < 0) {
          if (!store_.set(ep::ready_key(id_), "1").ok()) die("cannot set the ready key");
          ready_set = true;
        }
      }
      std::this_thread::sleep_for(5ms);
    }
  }

 private:
  void joined_(const ep::Plan& plan, int rank) {
    say("joined generation " + std::to_string(plan.generation) + " as rank " +
        std::to_string(rank) + " of " + std::to_string(plan.size()) + " (workers " +
        plan.workers_text() + ")");
    const std::string me = std::to_string(id_);
    if (settings_.count("done") && settings_["done"] == compact(plan)) std::exit(0);
    if (settings_.count("until") && plan.generation >= std::atoll(settings_["until"].c_str()))
      std::exit(0);
    if (first_) {
      first_ = false;
      const std::string exit = settings_.count("exit") ? settings_["exit"] : "";
      if (exit.rfind(me + ":", 0) == 0) std::exit(std::atoi(exit.c_str() + me.size() + 1));
      const std::string from = settings_.count("fail-from") ? settings_["fail-from"] : "";
      const size_t colon = from.find(':');
      if (colon != std::string::npos && id_ >= std::atoll(from.substr(0, colon).c_str()))
        std::exit(std::atoi(from.c_str() + colon + 1));
      if (settings_.count("kill") && settings_["kill"] == me) ::raise(SIGKILL);
    }
    if (plan.generation == 0 && settings_.count("ask") && settings_["ask"] == me)
      if (!store_.add(ep::reform_key(0), 1).ok()) die("cannot ask for a new generation");
  }

  kolo::Store& store_;
  const int64_t id_;
  std::map<std::string, std::string> settings_;
  bool first_ = true;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env") {
    for (const char* v : {"KOLO_ELASTIC_WORKER", "KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK",
                          "KOLO_CROSS_SIZE", "KOLO_SECRET"})
      say(std::string(v) + "=" +
          (std::getenv(v) ? (std::string(v) == "KOLO_SECRET" ? "set" : std::getenv(v))
                          : "<unset>"));
    return 0;
  }
  if (mode != "follow") die("usage: kolorun_elastic_child env|follow [SETTING...]");
  std::map<std::string, std::string> settings;
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    const size_t eq = s.find('=');
    if (eq == std::string::npos) die("setting " + s + ": expected NAME=VALUE");
    settings[s.substr(0, eq)] = s.substr(eq + 1);
  }
  const int64_t id = std::atoll(env_or("KOLO_ELASTIC_WORKER", "-1").c_str());
  if (id < 0) die("KOLO_ELASTIC_WORKER is not set");
  auto addr = kolo::parse_host_port(env_or("KOLO_STORE_ADDR", ""), "KOLO_STORE_ADDR");
  if (!addr.ok()) die(addr.status().message());
  auto store = kolo::TcpStore::connect(*addr, env_or("KOLO_SECRET", ""), 10s, 10s);
  if (!store.ok()) die(store.status().message());
  say("pid " + std::to_string(::getpid()));
  Worker(**store, id, std::move(settings)).follow();
}
