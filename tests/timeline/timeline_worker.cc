// One rank of the timeline jobs (timeline_job_test.cc starts it through kolorun, with
// KOLO_TIMELINE set, so the timeline records from init to shutdown).
//
// Modes (--mode):
//   train      a two-layer MLP trained for --steps SGD steps through DistributedOptimizer on
//              synthetic data (a training loop as users write it: the gradients' bucket
//              allreduces from backward hooks, step() waiting for them). --bucket-bytes N sets
//              DistributedOptions::bucket_bytes (default: its default, one bucket of all four
//              parameters); --set 1,2 trains on the process set of those ranks (the others only
//              take part in adding it). Prints "parameters: <count> <bytes>" and "trained".
//   every-op   every kind of operation, each with its own name, on a job of 3 ranks: on the
//              global set the collectives, grouped ones, objects, barrier and a send from rank
//              0 to rank 1; on the set of ranks 1 and 2 an allreduce, an allgather, a barrier
//              and a send from its rank 0 to its rank 1. Prints "every-op done".
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/distributed/distributed_optimizer.h"
#include "framework/functional.h"
#include "framework/optim/sgd.h"
#include "kolo/kolo.h"

namespace fw = kolo::fw;

namespace {

constexpr int kFeatures = 8;
constexpr int kHidden = 16;
constexpr int kClasses = 4;
constexpr int kBatch = 6;  // per rank

struct Args {
  std::string mode = "train";
  int steps = 10;
  int64_t bucket_bytes = -1;  // -1: DistributedOptimizer's default
  std::vector<int> set;       // empty: the global set
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "timeline_worker: %s\n", message.c_str());
  std::exit(1);
}

void check(const kolo::Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.to_string());
}

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::stringstream in(text);
  for (std::string r; std::getline(in, r, ',');) ranks.push_back(std::stoi(r));
  return ranks;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + flag);
      return argv[++i];
    };
    if (flag == "--mode") {
      a.mode = value();
    } else if (flag == "--steps") {
      a.steps = std::stoi(value());
    } else if (flag == "--bucket-bytes") {
      a.bucket_bytes = std::stoll(value());
    } else if (flag == "--set") {
      a.set = parse_ranks(value());
    } else {
      die("unknown flag " + flag);
    }
  }
  return a;
}

void train(const Args& args) {
  kolo::ProcessSet set;
  if (!args.set.empty()) {
    kolo::Result<kolo::ProcessSet> added = kolo::add_process_set(args.set);
    check(added.status(), "add_process_set");
    set = *added;
    if (!set.includes(kolo::rank())) return;
  }
  fw::Generator gen(7);
  fw::Tensor w1 = fw::Tensor::randn({kHidden, kFeatures}, 0.f, 0.4f, &gen);
  fw::Tensor b1 = fw::Tensor::zeros({kHidden});
  fw::Tensor w2 = fw::Tensor::randn({kClasses, kHidden}, 0.f, 0.4f, &gen);
  fw::Tensor b2 = fw::Tensor::zeros({kClasses});
  std::vector<std::pair<std::string, fw::Tensor>> named = {
      {"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}};
  std::vector<fw::Tensor> params;
  int64_t bytes = 0;
  for (auto& [name, t] : named) {
    t.set_requires_grad(true);
    params.push_back(t);
    bytes += static_cast<int64_t>(t.numel() * sizeof(float));
  }
  std::printf("parameters: %zu %lld\n", params.size(), static_cast<long long>(bytes));
  fw::SGD sgd(params, {.lr = 0.05});
  fw::DistributedOptions options{.process_set = set};
  if (args.bucket_bytes >= 0) options.bucket_bytes = args.bucket_bytes;
  fw::DistributedOptimizer opt(sgd, named, options);
  fw::Generator data(100 + kolo::rank());
  for (int step = 0; step < args.steps; ++step) {
    opt.zero_grad();
    fw::Tensor x = fw::Tensor::randn({kBatch, kFeatures}, 0.f, 1.f, &data);
    std::vector<int64_t> labels;
    for (int i = 0; i < kBatch; ++i) labels.push_back((step + i) % kClasses);
    fw::cross_entropy(fw::linear(fw::relu(fw::linear(x, w1, b1)), w2, b2),
                      fw::Tensor::from_labels(labels))
        .backward();
    opt.step();
  }
  std::printf("trained\n");
}

kolo::TensorView view(std::vector<float>& v) {
  return kolo::view_of(v.data(), {static_cast<int64_t>(v.size())});
}

void global_operations() {
  const int rank = kolo::rank(), size = kolo::size();
  std::vector<float> a(6, 1.0f), b(2, 1.0f), c(3, 1.0f);
  check(kolo::allreduce("op.allreduce", view(a)), "allreduce");
  check(kolo::grouped_allreduce("op.grouped_allreduce", {view(b), view(c)}), "grouped_allreduce");
  check(kolo::allgather("op.allgather", view(b)).status(), "allgather");
  check(kolo::broadcast("op.broadcast", view(c), 1), "broadcast");
  std::vector<float> rows(static_cast<size_t>(size), static_cast<float>(rank));
  check(kolo::alltoall("op.alltoall", view(rows)).status(), "alltoall");
  check(kolo::reducescatter("op.reducescatter", view(rows)).status(), "reducescatter");
  check(kolo::grouped_allgather("op.grouped_allgather", {view(b), view(c)}).status(),
        "grouped_allgather");
  check(kolo::grouped_reducescatter("op.grouped_reducescatter", {view(rows), view(rows)}).status(),
        "grouped_reducescatter");
  check(kolo::broadcast_object("op.object", "payload", 0).status(), "broadcast_object");
  check(kolo::allgather_object("op.objects", std::to_string(rank)).status(), "allgather_object");
  check(kolo::barrier("op.barrier"), "barrier");
  std::vector<float> p(4, static_cast<float>(rank));
  if (rank == 0) check(kolo::send("op.p2p", view(p), 1), "send");
  if (rank == 1) check(kolo::recv("op.p2p", view(p), 0), "recv");
}

void set_operations() {
  kolo::Result<kolo::ProcessSet> set = kolo::add_process_set({1, 2});
  check(set.status(), "add_process_set");
  if (!set->includes(kolo::rank())) return;
  std::vector<float> a(5, 1.0f), p(3, 1.0f);
  check(kolo::allreduce("set.allreduce", view(a), {.process_set = *set}), "set allreduce");
  check(kolo::allgather("set.allgather", view(a), *set).status(), "set allgather");
  check(kolo::barrier("set.barrier", *set), "set barrier");
  // Set ranks: its rank 0 is job rank 1.
  if (set->rank() == 0) check(kolo::send("set.p2p", view(p), 1, *set), "set send");
  if (set->rank() == 1) check(kolo::recv("set.p2p", view(p), 0, *set), "set recv");
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  check(kolo::init(), "init");
  if (args.mode == "train") {
    train(args);
  } else if (args.mode == "every-op") {
    if (kolo::size() != 3) die("every-op needs 3 ranks, got " + std::to_string(kolo::size()));
    global_operations();
    set_operations();
    std::printf("every-op done\n");
  } else {
    die("unknown mode " + args.mode);
  }
  check(kolo::shutdown(), "shutdown");
  return 0;
}
