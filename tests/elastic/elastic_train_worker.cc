// One rank of an elastic training loop for elastic_recovery_test and bench/elastic_recovery.py:
// a "model" of E floats (--elements, default 1024) that every step adds the average of every rank's
// gradient to (each rank's gradient is all ones, so every step adds exactly 1.0 to each weight,
// whatever the world's size), a step counter, and a commit every --commit-every steps, inside
// kolo::elastic::run(). So a job that finishes has weights equal to its step count exactly,
// however many times its world changed: a step lost and redone, or done twice, shows.
//
//   elastic_train_worker --steps N [--commit-every K] [--step-ms M] [--elements E]
//                        [--die W:S:G[:how]]...
//                        [--die-in-reset W] [--process-set R,R,...]
// --die: worker W (KOLO_ELASTIC_WORKER) dies at its first step from S on (S itself unless its
// world reached generation G later) while its world is generation G; how is kill
// (SIGKILL, the default), exit (status 3) or hang (sleeps until killed). --die-in-reset: worker W
// is killed inside its first re-forming (the State's on_reset, after the sync). --process-set:
// a set of these ranks of generation 0, on which its members allreduce ones every step (each
// sum must be the set's size) until an operation on it fails ("set error: <status>"). Each rank
// prints
//   "step <s> generation <g> size <n> at <unix ns>" when it starts a step after (re)joining,
//   "done steps <N> weights <w> generation <g> size <n> resets <r>" at the end, and
//   "failed: <status>" when run() fails.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kolo/elastic.h"
#include "kolo/kolo.h"

namespace {

struct Death {
  int64_t worker = -1, step = -1, generation = -1;
  std::string how = "kill";
};

struct Args {
  int64_t steps = 20, commit_every = 1, step_ms = 0, die_in_reset = -1, elements = 1024;
  std::vector<int> process_set;
  std::vector<Death> deaths;
};

// "W:S:G[:how]"
Death parse_death(const std::string& spec) {
  Death d;
  size_t a = spec.find(':'), b = spec.find(':', a + 1), c = spec.find(':', b + 1);
  d.worker = std::stoll(spec.substr(0, a));
  d.step = std::stoll(spec.substr(a + 1, b - a - 1));
  d.generation = std::stoll(spec.substr(b + 1, c == std::string::npos ? c : c - b - 1));
  if (c != std::string::npos) d.how = spec.substr(c + 1);
  return d;
}

// "R,R,..."
std::vector<int> parse_ranks(const std::string& list) {
  std::vector<int> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(std::stoi(list.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--steps") a.steps = std::stoll(value);
    if (flag == "--commit-every") a.commit_every = std::stoll(value);
    if (flag == "--step-ms") a.step_ms = std::stoll(value);
    if (flag == "--elements") a.elements = std::stoll(value);
    if (flag == "--die") a.deaths.push_back(parse_death(value));
    if (flag == "--die-in-reset") a.die_in_reset = std::stoll(value);
    if (flag == "--process-set") a.process_set = parse_ranks(value);
  }
  return a;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t worker_id() {
  const char* w = std::getenv("KOLO_ELASTIC_WORKER");
  return w ? std::atoll(w) : -1;
}

void die(const std::string& how, const std::string& where) {
  std::printf("worker %lld dies (%s) %s at %lld\n", static_cast<long long>(worker_id()),
              how.c_str(), where.c_str(), static_cast<long long>(now_ns()));
  std::fflush(stdout);
  if (how == "exit") std::_Exit(3);
  if (how == "hang")
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(::getpid(), SIGKILL);
}

void maybe_die(const Args& a, int64_t step) {
  for (const Death& d : a.deaths)
    if (step >= d.step && d.worker == worker_id() && d.generation == kolo::elastic::generation())
      die(d.how, "at step " + std::to_string(step));
}

// The set's allreduce of ones on its members. A lost peer fails the step (run() re-forms the
// world); a set that a re-forming closed is said once ("set error: ...") and used no more.
kolo::Status use_set(kolo::ProcessSet& set, bool& usable) {
  if (!usable) return kolo::Status::Ok();
  // After a re-forming the set's members have new ranks: the set as this world numbers it.
  for (const kolo::ProcessSet& now : kolo::process_sets())
    if (now.id() == set.id()) set = now;
  if (!set.includes(kolo::rank())) return kolo::Status::Ok();
  float one = 1.0f;
  kolo::Status st = kolo::allreduce("setgrad", kolo::view_of(&one, {1}), {.process_set = set});
  if (st.ok() && one != static_cast<float>(set.size()))
    st = kolo::Status::Internal("set sum " + std::to_string(one));
  if (st.code() != kolo::StatusCode::kPreconditionFailed) return st;
  std::printf("set error: %s\n", st.to_string().c_str());
  usable = false;
  return kolo::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (kolo::Status st = kolo::init(); !st.ok()) {
    std::printf("failed: %s\n", st.to_string().c_str());
    return 1;
  }
  kolo::ProcessSet set;
  bool set_usable = !a.process_set.empty();
  if (set_usable && kolo::elastic::generation() == 0) {
    kolo::Result<kolo::ProcessSet> added = kolo::add_process_set(a.process_set);
    if (!added.ok()) {
      std::printf("failed: %s\n", added.status().to_string().c_str());
      return 1;
    }
    set = *added;
  }
  const int64_t n = a.elements;
  std::vector<float> weights(n, 0.0f), grad(n);
  int64_t step = 0, resets = -1;
  kolo::elastic::State state;
  (void)state.add_tensor("weights", kolo::view_of(weights.data(), {n}));
  (void)state.add_counter("step", &step);
  state.on_reset([&] {
    if (worker_id() == a.die_in_reset) die("kill", "in its first reset");
    return kolo::Status::Ok();
  });
  kolo::Status st = kolo::elastic::run(state, [&]() -> kolo::Status {
    ++resets;
    bool first = true;
    for (; step < a.steps; ++step) {
      if (first) {
        std::printf("step %lld generation %lld size %d at %lld\n", static_cast<long long>(step),
                    static_cast<long long>(kolo::elastic::generation()), kolo::size(),
                    static_cast<long long>(now_ns()));
        std::fflush(stdout);
        first = false;
      }
      maybe_die(a, step);
      if (a.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.step_ms));
      KOLO_RETURN_IF_ERROR(use_set(set, set_usable));
      std::fill(grad.begin(), grad.end(), 1.0f);
      KOLO_RETURN_IF_ERROR(
          kolo::allreduce("grad", kolo::view_of(grad.data(), {n}),
                          kolo::AllreduceOptions{kolo::Reduction{kolo::ReduceOp::kAverage}}));
      for (int64_t i = 0; i < n; ++i) weights[i] += grad[i];
      if ((step + 1) % a.commit_every == 0) {
        ++step;  // the commit records the step as done
        kolo::Status committed = state.commit();
        --step;
        KOLO_RETURN_IF_ERROR(committed);
      }
    }
    return kolo::Status::Ok();
  });
  if (!st.ok()) {
    std::printf("failed: %s\n", st.to_string().c_str());
    std::fflush(stdout);
    return 1;
  }
  std::printf("done steps %lld weights %.1f generation %lld size %d resets %lld\n",
              static_cast<long long>(step), weights[0],
              static_cast<long long>(kolo::elastic::generation()), kolo::size(),
              static_cast<long long>(resets));
  if (set_usable && set.includes(kolo::rank()))
    std::printf("set %d size %d ok\n", set.id(), set.size());
  for (float w : weights)
    if (w != weights[0]) std::printf("weights differ: %f vs %f\n", w, weights[0]);
  (void)kolo::shutdown();
  return 0;
}
