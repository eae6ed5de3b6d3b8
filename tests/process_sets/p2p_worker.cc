// One rank of a point-to-point job (kolo::send_async / recv_async): `p2p_worker <scenario>`.
// Prints "rank R: <scenario> passed" on success; failures print what differed and exit 1.
//   p2p    a ring of sends with exact values; many tensors in flight both ways between ranks
//          0 and 1; every pair at once, one thread per peer; sends interleaved with global
//          allreduces; sends within a process set that excludes rank 0; bad destinations and
//          a mismatched send/recv (printed: the test checks the messages); the pair still
//          works after them.
//   gone   (3 ranks) peers that shut down: rank 0's send to rank 2, which never receives, and
//          its recv from rank 1, which shuts down after connecting, fail naming them instead
//          of waiting for good.
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"
#include "tests/support/worker_checks.h"

namespace {

using kolo::testing::failures;
using kolo::testing::ok;

// The value element i of transfer `tag` from `from` carries, distinct per transfer.
float value(int from, int tag, int i) { return from * 1000.0f + tag * 10.0f + i; }

std::vector<float> payload(int from, int tag, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = value(from, tag, i);
  return v;
}

bool holds(const std::vector<float>& v, int from, int tag) {
  for (int i = 0; i < static_cast<int>(v.size()); ++i)
    if (v[i] != value(from, tag, i)) return false;
  return true;
}

// Each rank sends to the next and receives from the previous; transfers are named by their
// sender, so that with two ranks the send and the recv between them stay two names.
void ring(int rounds) {
  const int me = kolo::rank(), P = kolo::size();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  for (int round = 0; round < rounds; ++round) {
    std::vector<float> out = payload(me, round, 5), in(5, -1.0f);
    auto s = kolo::send_async("ring." + std::to_string(me), kolo::view_of(out.data(), {5}), next);
    auto r = kolo::recv_async("ring." + std::to_string(prev), kolo::view_of(in.data(), {5}), prev);
    ok(s.wait(), "ring send");
    ok(r.wait(), "ring recv");
    CHECK(holds(in, prev, round));
    CHECK(holds(out, me, round));  // the sender's tensor is only read
  }
}

// Ranks 0 and 1 send each other `count` tensors at once (sizes 0 to ~1 MB), all in flight.
void both_ways(int count) {
  const int me = kolo::rank();
  if (me > 1) return;
  const int peer = 1 - me;
  std::vector<std::vector<float>> out, in;
  std::vector<kolo::Handle> handles;
  for (int k = 0; k < count; ++k) {
    const int n = k == count - 1 ? 1 << 18 : k;
    out.push_back(payload(me, k, n));
    in.emplace_back(n, -1.0f);
  }
  for (int k = 0; k < count; ++k) {
    const int n = static_cast<int>(out[k].size());
    handles.push_back(kolo::send_async("bw." + std::to_string(me) + "." + std::to_string(k),
                                       kolo::view_of(out[k].data(), {n}), peer));
    handles.push_back(kolo::recv_async("bw." + std::to_string(peer) + "." + std::to_string(k),
                                       kolo::view_of(in[k].data(), {n}), peer));
  }
  for (auto& h : handles) ok(h.wait(), "both ways " + h.name());
  for (int k = 0; k < count; ++k) CHECK(holds(in[k], peer, k));
}

// One thread per peer, all at once: every pair of ranks connects and exchanges concurrently.
void every_pair() {
  const int me = kolo::rank(), P = kolo::size();
  std::vector<std::thread> threads;
  for (int peer = 0; peer < P; ++peer) {
    if (peer == me) continue;
    threads.emplace_back([me, peer] {
      for (int k = 0; k < 3; ++k) {
        std::vector<float> out = payload(me, k, 7), in(7, -1.0f);
        const std::string to = "pair." + std::to_string(me) + "." + std::to_string(k);
        const std::string from = "pair." + std::to_string(peer) + "." + std::to_string(k);
        auto s = kolo::send_async(to, kolo::view_of(out.data(), {7}), peer);
        ok(kolo::recv(from, kolo::view_of(in.data(), {7}), peer), "every pair recv");
        ok(s.wait(), "every pair send");
        CHECK(holds(in, peer, k));
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Sends around the ring while global allreduces of the same steps are in flight.
void with_allreduces(int steps) {
  const int me = kolo::rank(), P = kolo::size();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  for (int step = 0; step < steps; ++step) {
    std::vector<double> grad(4, me + 1.0);
    auto ar = kolo::allreduce_async("ar." + std::to_string(step), kolo::view_of(grad.data(), {4}));
    std::vector<float> out = payload(me, step, 3), in(3, -1.0f);
    auto s = kolo::send_async("act." + std::to_string(me), kolo::view_of(out.data(), {3}), next);
    auto r = kolo::recv_async("act." + std::to_string(prev), kolo::view_of(in.data(), {3}), prev);
    ok(ar.wait(), "allreduce");
    ok(s.wait(), "send beside allreduce");
    ok(r.wait(), "recv beside allreduce");
    CHECK(grad[3] == P * (P + 1) / 2.0);
    CHECK(holds(in, prev, step));
  }
}

// Within the set of ranks 1..P-1 (no rank 0), a ring in set ranks: set rank s sends to set
// rank s+1 under the name "set.<s>"; the global ring's names are another name space.
void within_set(const kolo::ProcessSet& set) {
  const int s = set.rank(), k = set.size();
  if (s < 0 || k < 2) return;
  const int to = (s + 1) % k, from = (s + k - 1) % k;
  std::vector<float> out = payload(kolo::rank(), 7, 4), in(4, -1.0f);
  auto h = kolo::send_async("set." + std::to_string(s), kolo::view_of(out.data(), {4}), to, set);
  ok(kolo::recv("set." + std::to_string(from), kolo::view_of(in.data(), {4}), from, set),
     "set recv");
  ok(h.wait(), "set send");
  CHECK(holds(in, set.ranks()[from], 7));
}

void print(const std::string& what, const kolo::Status& st) {
  std::printf("rank %d %s: %s\n", kolo::rank(), what.c_str(), st.to_string().c_str());
}

void bad_inputs(const kolo::ProcessSet& no_zero) {
  const int me = kolo::rank(), P = kolo::size();
  std::vector<float> v(4, 1.0f);
  auto view = kolo::view_of(v.data(), {4});
  kolo::Handle self = kolo::send_async("self", view, me);
  CHECK(self.poll());  // failed at submission
  CHECK(self.status().code() == kolo::StatusCode::kInvalidArgument);
  print("self", self.status());
  kolo::Status far = kolo::recv("far", view, P);
  CHECK(far.code() == kolo::StatusCode::kInvalidArgument);
  print("far", far);
  CHECK(kolo::send("negative", view, -1).code() == kolo::StatusCode::kInvalidArgument);
  if (!no_zero.includes(me)) {
    kolo::Status outside = kolo::send("outside", view, 0, no_zero);
    CHECK(outside.code() == kolo::StatusCode::kInvalidArgument);
    print("outside", outside);
  } else {
    // Set rank k-1's job rank is P-1: out of the set's range is k, even though P-1 exists.
    kolo::Status beyond = kolo::send("beyond", view, no_zero.size(), no_zero);
    CHECK(beyond.code() == kolo::StatusCode::kInvalidArgument);
    print("beyond", beyond);
  }

  // Ranks 0 and 1: a recv whose shape differs from the send's, then both sending one name.
  // Both ranks see each Mismatch, and the pair then works as before.
  if (me > 1) return;
  const int peer = 1 - me;
  std::vector<float> big(5, 2.0f);
  kolo::Status shape = me == 0 ? kolo::send("mm", view, peer)
                               : kolo::recv("mm", kolo::view_of(big.data(), {5}), peer);
  CHECK(shape.code() == kolo::StatusCode::kMismatch);
  print("shape", shape);
  kolo::Status both = kolo::send("both", view, peer);
  CHECK(both.code() == kolo::StatusCode::kMismatch);
  print("both", both);
  std::vector<float> out = payload(me, 9, 4), in(4, -1.0f);
  auto s = kolo::send_async("after." + std::to_string(me), kolo::view_of(out.data(), {4}), peer);
  ok(kolo::recv("after." + std::to_string(peer), kolo::view_of(in.data(), {4}), peer), "after");
  ok(s.wait(), "after send");
  CHECK(holds(in, peer, 9));
}

void p2p() {
  const int P = kolo::size();
  std::vector<int> rest;
  for (int r = 1; r < P; ++r) rest.push_back(r);
  auto no_zero = kolo::add_process_set(rest);
  if (!ok(no_zero.status(), "add_process_set")) return;
  ring(3);
  both_ways(24);
  every_pair();
  with_allreduces(5);
  within_set(*no_zero);
  bad_inputs(*no_zero);
  ok(kolo::barrier("done"), "barrier");
}

// Three ranks. Rank 2 shuts down without ever sending: rank 0's send to it fails naming it.
// Rank 1 connects to rank 0, then shuts down while rank 0 waits on a recv from it: the recv
// fails naming the pair and rank 1.
void gone() {
  const int me = kolo::rank();
  std::vector<float> v(4, 1.0f);
  auto view = kolo::view_of(v.data(), {4});
  if (me == 2) return;
  if (me == 1) {
    ok(kolo::send("hello", view, 0), "hello");
    return;
  }
  ok(kolo::recv("hello", view, 1), "hello");
  kolo::Handle never = kolo::recv_async("never", view, 1);
  kolo::Status lonely = kolo::send("lonely", view, 2);
  CHECK(lonely.code() == kolo::StatusCode::kAborted);
  print("lonely", lonely);
  kolo::Status st = never.wait();
  CHECK(st.code() == kolo::StatusCode::kAborted);
  print("never", st);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "p2p";
  std::vector<float> v(1);
  CHECK(kolo::send("early", kolo::view_of(v.data(), {1}), 1).code() ==
        kolo::StatusCode::kPreconditionFailed);
  if (!ok(kolo::init(), "init")) return 1;
  const int me = kolo::rank();
  if (scenario == "p2p")
    p2p();
  else if (scenario == "gone")
    gone();
  ok(kolo::shutdown(), "shutdown");
  if (failures > 0) return 1;
  std::printf("rank %d: %s passed\n", me, scenario.c_str());
  return 0;
}
