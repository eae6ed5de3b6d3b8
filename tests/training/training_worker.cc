// One rank of the data-parallel training tests (training_test.cc starts it through kolorun).
//
// A two-layer MLP is trained for a few SGD steps (momentum 0.9) on a fixed synthetic data set.
// Each step's global batch is the same 12 samples whatever the number of ranks; the ranks split
// it UNEVENLY (e.g. 4 and 8 samples for 2 ranks), so the result equals 1-rank training only if
// gradients are averaged weighted by sample counts. Rank 0 writes the final parameters to --out.
//
// Modes (--mode):
//   train       the above; --passes 2 splits each rank's share into two backward passes
//               (gradient accumulation, backward_passes_per_step = 2). --bucket-bytes N sets
//               DistributedOptions::bucket_bytes (default: its default, one bucket here).
//               Under KOLO_AUTOTUNE=1 every rank prints, at the end, "autotune history: "
//               with every configuration applied (cycle/from step/threshold/cycle time/bucket)
//               and "buckets per step: " with its bucket count at each step.
//   nosync      as train, but each rank's --passes passes run with backward_passes_per_step 1:
//               all but the last inside DistributedOptimizer::no_sync() (the worker exits 1
//               if anything is submitted there), the last one synced. The step's gradient is
//               then the sum over the passes, as one rank running the same passes on the
//               whole batch gets it.
//   rank-zero   the rank-0 helpers (framework/distributed/rank_zero.h), no training: a RankLogger
//               line from rank 0 only and one from every rank; run_on_root_first where rank 0
//               writes --out after 300 ms (every rank then sees the file: "file seen"), where
//               it fails ("fail: <status>" on every rank) and where it throws ("throw: ...").
//   rank-zero-set  the same helpers on the set of ranks 1..P-1 (no rank 0): its first member
//               logs, its members log with a prefix, and its last member runs the work.
//   overlap     inside the hook of the last gradient of backward, waits for the allreduce of
//               the first bucket: it can only complete if communication runs during backward.
//               Default --bucket-bytes 0 (an allreduce per gradient: fc2's two are submitted
//               by then); 272 makes fc2's weight and bias one grouped bucket.
//   broadcast   every rank starts from different weights; after broadcast_parameters every
//               rank writes its parameters to --out.<rank>.
//   syncbn      the model gets a BatchNorm1d after fc1 whose statistics are synchronised
//               across ranks (SyncBatchStatsReducer); the result (running statistics
//               included) equals 1-rank BatchNorm on the whole batch, shared unevenly too.
//   checkpoint  trains --steps, saving a checkpoint (rank 0) after --save-at steps to --ckpt;
//               with --resume, loads --ckpt on every rank first and continues from there.
//   ckpt-failure  the error paths of save_checkpoint_on_root / load_checkpoint_from_root
//               (no training). Every rank gives its model and optimizer state distinct values,
//               then --fail picks what goes wrong:
//                 save     save_checkpoint_on_root(--ckpt), a path the root cannot write;
//                 missing  load_checkpoint_from_root(--ckpt), a file that does not exist;
//                 corrupt  a good save to --ckpt first, rank 0 flips one payload byte, then
//                          load_checkpoint_from_root(--ckpt) must fail its CRC check.
//               Each rank must throw: it prints "<fail> failed: <status>" and carries on. It
//               then checks its state is bit-identical to before ("state unchanged") and
//               that the job still works: a save to --good plus a load on every rank from
//               other values gives the root's state back bit-exactly ("round trip ok").
//               A rank that does not fail or differs exits 1 with the reason.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "framework/autograd.h"
#include "framework/distributed/broadcast_state.h"
#include "framework/distributed/distributed_optimizer.h"
#include "framework/distributed/rank_zero.h"
#include "framework/distributed/sync_batch_norm.h"
#include "framework/functional.h"
#include "framework/nn/layers.h"
#include "framework/optim/sgd.h"
#include "kolo/kolo.h"

namespace fw = kolo::fw;

namespace {

constexpr int kSamples = 64;
constexpr int kFeatures = 8;
constexpr int kClasses = 4;
constexpr int kGlobalBatch = 12;

struct Args {
  std::string mode = "train";
  std::string out;
  std::string ckpt;
  std::string fail;  // ckpt-failure: save, missing or corrupt
  std::string good;  // ckpt-failure: where the follow-up good checkpoint goes
  int steps = 5;
  int passes = 1;
  int save_at = -1;
  bool resume = false;
  int64_t bucket_bytes = -1;  // -1: DistributedOptimizer's default (overlap mode: 0)
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "training_worker: %s\n", message.c_str());
  std::exit(1);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + flag);
      return argv[++i];
    };
    if (flag == "--mode")
      a.mode = value();
    else if (flag == "--out")
      a.out = value();
    else if (flag == "--ckpt")
      a.ckpt = value();
    else if (flag == "--fail")
      a.fail = value();
    else if (flag == "--good")
      a.good = value();
    else if (flag == "--steps")
      a.steps = std::stoi(value());
    else if (flag == "--passes")
      a.passes = std::stoi(value());
    else if (flag == "--save-at")
      a.save_at = std::stoi(value());
    else if (flag == "--resume")
      a.resume = true;
    else if (flag == "--bucket-bytes")
      a.bucket_bytes = std::stoll(value());
    else
      die("unknown flag " + flag);
  }
  return a;
}

// How the 12 samples of a step are shared: deliberately uneven unless `even`.
std::vector<int> shares(int world, bool even) {
  if (even) return std::vector<int>(world, kGlobalBatch / world);
  switch (world) {
    case 1:
      return {12};
    case 2:
      return {4, 8};
    case 3:
      return {2, 4, 6};
    case 4:
      return {2, 2, 4, 4};
    default:
      die("the tests use 1 to 4 ranks");
  }
}

struct Model {
  fw::Tensor w1, b1, w2, b2;
  std::shared_ptr<fw::nn::BatchNorm1d> bn;  // syncbn mode only

  // The trained parameters.
  fw::NamedTensors named() const {
    fw::NamedTensors named = {
        {"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}};
    if (bn) {
      for (auto& [name, t] : bn->named_parameters()) named.emplace_back("bn." + name, t);
    }
    return named;
  }
  // What the tests compare: the parameters and BatchNorm's running statistics.
  fw::NamedTensors state() const {
    fw::NamedTensors all = named();
    if (bn) {
      all.emplace_back("bn.running_mean", bn->running_mean());
      all.emplace_back("bn.running_var", bn->running_var());
    }
    return all;
  }
  fw::Tensor forward(const fw::Tensor& x) const {
    fw::Tensor h = fw::linear(x, w1, b1);
    if (bn) h = bn->forward(h);
    return fw::linear(fw::relu(h), w2, b2);
  }
};

Model make_model(uint64_t seed) {
  fw::Generator gen(seed);
  Model m;
  m.w1 = fw::Tensor::randn({16, kFeatures}, 0.f, 0.4f, &gen);
  m.b1 = fw::Tensor::randn({16}, 0.f, 0.1f, &gen);
  m.w2 = fw::Tensor::randn({kClasses, 16}, 0.f, 0.4f, &gen);
  m.b2 = fw::Tensor::zeros({kClasses});
  for (auto* t : {&m.w1, &m.b1, &m.w2, &m.b2}) t->set_requires_grad(true);
  return m;
}

// Rows [begin, begin + n) of the data set, wrapping around.
void batch(int begin, int n, fw::Tensor* x, fw::Tensor* y) {
  static const fw::Tensor all_x = [] {
    fw::Generator gen(123);
    return fw::Tensor::randn({kSamples, kFeatures}, 0.f, 1.f, &gen);
  }();
  std::vector<float> xs;
  std::vector<int64_t> ys;
  const float* data = all_x.data<float>();
  for (int i = 0; i < n; ++i) {
    int row = (begin + i) % kSamples;
    xs.insert(xs.end(), data + row * kFeatures, data + (row + 1) * kFeatures);
    ys.push_back(row % kClasses);
  }
  *x = fw::Tensor::from_vector(xs, {n, kFeatures});
  *y = fw::Tensor::from_labels(ys);
}

void write_params(const std::string& path, const Model& m) {
  std::ofstream out(path);
  if (!out) die("cannot write " + path);
  out.precision(9);
  for (const auto& [name, t] : m.state()) {
    out << name;
    for (float v : t.to_vector()) out << ' ' << v;
    out << '\n';
  }
}

void check(const kolo::Status& s, const char* what) {
  if (!s.ok()) die(std::string(what) + ": " + s.to_string());
}

// ---- ckpt-failure mode ----

// Overwrites every tensor of `state` (float32 parameters and momentum, int64 counters) with
// values that depend only on `seed`, so a rank can recompute another rank's values.
void fill_state(const fw::NamedTensors& state, uint64_t seed) {
  fw::Generator gen(seed);
  for (const auto& [name, t] : state) {
    fw::Tensor handle = t;  // shares the storage of the model / optimizer
    if (t.dtype() == kolo::DataType::kFloat32) {
      handle.copy_(fw::Tensor::randn(t.shape(), 0.f, 1.f, &gen));
    } else if (t.dtype() == kolo::DataType::kInt64) {
      int64_t* p = handle.data<int64_t>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<int64_t>(seed % 97) + i;
    } else {
      die("fill_state: unexpected dtype of " + name);
    }
  }
}

using Snapshot = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

Snapshot snapshot(const fw::NamedTensors& state) {
  Snapshot out;
  for (const auto& [name, t] : state) {
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    out.emplace_back(name, std::vector<uint8_t>(p, p + t.nbytes()));
  }
  return out;
}

// Dies naming the first tensor whose bytes differ.
void expect_same(const Snapshot& actual, const Snapshot& expected, const std::string& what) {
  if (actual.size() != expected.size()) die(what + ": tensor count changed");
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i].second != expected[i].second) {
      die(what + ": tensor '" + actual[i].first + "' differs");
    }
  }
}

// Flips one bit of the byte just before the 4-byte CRC trailer: the last payload byte of the
// last entry, so the structure still parses and only the checksum can catch it.
void corrupt_last_payload_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) die("cannot open " + path + " to corrupt it");
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  if (size < 32) die(path + " is too small to be a checkpoint");
  char byte;
  f.seekg(size - 5);
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x10);
  f.seekp(size - 5);
  f.write(&byte, 1);
  if (!f.flush()) die("cannot corrupt " + path);
}

void print_line(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);  // kolorun prefixes whole lines; keep them in order with stderr
}

void run_ckpt_failure(const Args& args, int rank) {
  if (args.ckpt.empty() || args.good.empty()) die("ckpt-failure needs --ckpt and --good");
  Model m = make_model(7);
  std::vector<fw::Tensor> params;
  for (auto& [name, t] : m.named()) params.push_back(t);
  fw::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
  fw::NamedTensors state = m.named();
  for (auto& entry : fw::optimizer_state(sgd)) state.push_back(entry);

  if (args.fail == "corrupt") {
    fill_state(state, 500);  // what the file holds: differs from every rank's values below
    fw::save_checkpoint_on_root(args.ckpt, m.named(), &sgd);
    if (rank == 0) corrupt_last_payload_byte(args.ckpt);
  } else if (args.fail != "save" && args.fail != "missing") {
    die("--fail must be save, missing or corrupt, got '" + args.fail + "'");
  }

  fill_state(state, 1000 + rank);
  const Snapshot before = snapshot(state);
  try {
    if (args.fail == "save") {
      fw::save_checkpoint_on_root(args.ckpt, m.named(), &sgd);
    } else {
      fw::load_checkpoint_from_root(args.ckpt, m.named(), &sgd);
    }
    die(args.fail + ": expected an error on rank " + std::to_string(rank) + ", got none");
  } catch (const kolo::Error& e) {
    print_line(args.fail + " failed: " + e.status().to_string());
  }
  expect_same(snapshot(state), before, "after the failed " + args.fail);
  print_line("state unchanged");

  // The collectives are still in step: the root saves its values, everyone scrambles theirs
  // and loads them back from the root.
  fw::save_checkpoint_on_root(args.good, m.named(), &sgd);
  fill_state(state, 2000 + rank);
  fw::load_checkpoint_from_root(args.good, m.named(), &sgd);
  const Snapshot loaded = snapshot(state);
  fill_state(state, 1000);  // rank 0's values
  expect_same(loaded, snapshot(state), "after the round trip");
  print_line("round trip ok");
}

// --mode rank-zero: RankLogger on the root and on every rank, run_on_root_first's success,
// failure and exception.
void run_rank_zero(const Args& args, int world) {
  fw::RankLogger root_log;
  root_log.printf("root only: %d rank(s)\n", world);
  fw::RankLogger all_log({.every_rank = true});
  all_log.line("every rank\nsecond line");
  check(fw::run_on_root_first("prepare",
                              [&] {
                                std::this_thread::sleep_for(std::chrono::milliseconds(300));
                                std::ofstream(args.out) << "data\n";
                                return kolo::Status::Ok();
                              }),
        "prepare");
  if (std::ifstream(args.out).good()) print_line("file seen");
  kolo::Status failed =
      fw::run_on_root_first("fail", [] { return kolo::Status::IoError("disk full"); });
  print_line("fail: " + failed.to_string());
  kolo::Status thrown =
      fw::run_on_root_first("throw", []() -> kolo::Status { throw std::runtime_error("boom"); });
  print_line("throw: " + thrown.to_string());
}

// --mode rank-zero-set: the helpers on the set of ranks 1..P-1: its rank 0 is job rank 1; rank 0
// takes no part.
void run_rank_zero_set(const Args& args, int rank, int world) {
  std::vector<int> rest;
  for (int r = 1; r < world; ++r) rest.push_back(r);
  auto set = kolo::add_process_set(rest);
  check(set.status(), "add_process_set");
  fw::RankLogger({.process_set = *set}).line("set root only");
  fw::RankLogger({.every_rank = true, .process_set = *set}).line("set member");
  if (!set->includes(rank)) return;
  const int last = set->size() - 1;  // set rank of job rank world - 1
  check(fw::run_on_root_first(
            "set.prepare",
            [&] {
              std::ofstream(args.out) << "data\n";
              return kolo::Status::Ok();
            },
            last, *set),
        "set.prepare");
  if (std::ifstream(args.out).good()) print_line("set file seen");
  kolo::Status failed = fw::run_on_root_first(
      "set.fail", [] { return kolo::Status::IoError("disk full"); }, last, *set);
  print_line("set fail: " + failed.to_string());
}

// --mode overlap: fc1's gradients are the last ones backward finishes; by then fc2's bucket(s)
// were submitted: two allreduces, or one grouped bucket of both. The hook waits for the first
// while backward is still running, and counts how often it did.
void install_overlap_hook(Model& m, fw::DistributedOptimizer& opt, int* completed) {
  const size_t fc2_buckets = opt.bucket_names().front() == "grad.fc2.bias" ? 2 : 1;
  m.w1.register_grad_ready_hook([&opt, completed, fc2_buckets](fw::Tensor&) {
    auto handles = opt.submitted_handles();
    if (handles.size() < fc2_buckets)
      die("expected fc2's " + std::to_string(fc2_buckets) +
          " bucket(s) submitted before fc1's gradient, got " + std::to_string(handles.size()));
    check(handles.front().wait(std::chrono::seconds(30)),
          "first gradient's allreduce while backward still runs");
    ++*completed;
  });
}

void check_overlap(const fw::DistributedOptimizer& opt, int completed, int steps) {
  if (completed != steps)
    die("overlap hook ran " + std::to_string(completed) + " times for " + std::to_string(steps) +
        " steps");
  if (opt.stats().submitted_from_hooks != 4 * steps)
    die("expected every gradient submitted from its hook, got " +
        std::to_string(opt.stats().submitted_from_hooks));
  std::printf("overlap ok: %d steps\n", steps);
}

// One step's passes over this rank's share of the global batch (--passes; --mode nosync
// accumulates all but the last under no_sync() and checks that nothing was submitted).
void run_passes(const Args& args, Model& m, fw::DistributedOptimizer& opt, int begin, int local) {
  const bool nosync = args.mode == "nosync";
  const int per_pass = local / args.passes;
  for (int pass = 0; pass < args.passes; ++pass) {
    fw::Tensor x, y;
    batch(begin + pass * per_pass, per_pass, &x, &y);
    opt.set_local_batch_size(per_pass);
    if (nosync && pass + 1 < args.passes) {
      const int64_t from_hooks = opt.stats().submitted_from_hooks;
      auto scope = opt.no_sync();
      fw::cross_entropy(m.forward(x), y).backward();
      if (!opt.submitted_handles().empty() || opt.stats().submitted_from_hooks != from_hooks)
        die("no_sync pass " + std::to_string(pass) + " submitted an allreduce");
      continue;
    }
    fw::cross_entropy(m.forward(x), y).backward();
  }
}

// The autotuner's entries in effect (a decision for a later step may not have reached every
// rank yet) and the bucket count of every step, when the tuner ran.
void print_autotune_history(const std::string& buckets_per_step) {
  const auto history = kolo::autotune_history(kolo::steps_marked());
  if (history.empty()) return;
  std::string line = "autotune history:";
  for (const auto& h : history)
    line += " " + std::to_string(h.cycle) + "/" + std::to_string(h.from_step) + "/" +
            std::to_string(h.fusion_threshold) + "/" + std::to_string(h.cycle_time_ns) + "/" +
            std::to_string(h.bucket_bytes);
  print_line(line);
  print_line("buckets per step:" + buckets_per_step);
}

// The training modes: uneven shares of a global batch, DistributedOptimizer, optional
// checkpoint save/resume, overlap and no_sync checks; rank 0 writes the parameters to --out.
void run_training(const Args& args, int rank, int world) {
  Model m = make_model(7);
  if (args.mode == "syncbn") {
    m.bn = std::make_shared<fw::nn::BatchNorm1d>(
        16, 1e-5f, 0.1f, std::make_shared<fw::SyncBatchStatsReducer>("syncbn.bn"));
  }
  std::vector<fw::Tensor> params;
  for (auto& [name, t] : m.named()) params.push_back(t);
  fw::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
  fw::DistributedOptions dist{.backward_passes_per_step = args.mode == "nosync" ? 1 : args.passes};
  // overlap needs fc2's gradients in buckets of their own, submitted before fc1's gradient is
  // final (the default bucket would hold all four and start only after fc1's).
  const int64_t bucket_bytes = args.bucket_bytes >= 0   ? args.bucket_bytes
                               : args.mode == "overlap" ? 0
                                                        : -1;
  if (bucket_bytes >= 0) dist.bucket_bytes = bucket_bytes;
  fw::DistributedOptimizer opt(sgd, m.named(), dist);

  int first_step = 0;
  if (args.mode == "checkpoint" && args.resume) {
    fw::load_checkpoint(args.ckpt, m.named(), &sgd);  // every rank reads the shared file
    first_step = static_cast<int>(sgd.step_count());
  }
  int overlap_completed = 0;
  if (args.mode == "overlap") install_overlap_hook(m, opt, &overlap_completed);

  const std::vector<int> share = shares(world, /*even=*/false);
  int offset = 0;
  for (int r = 0; r < rank; ++r) offset += share[r];
  std::string buckets_per_step;
  for (int step = first_step; step < args.steps; ++step) {
    buckets_per_step += " " + std::to_string(opt.bucket_names().size());
    opt.zero_grad();
    run_passes(args, m, opt, step * kGlobalBatch + offset, share[rank]);
    opt.step();
    if (args.mode == "checkpoint" && step + 1 == args.save_at)
      fw::save_checkpoint_on_root(args.ckpt, m.named(), &sgd);
  }
  if (args.mode == "overlap") check_overlap(opt, overlap_completed, args.steps - first_step);
  if (rank == 0 && !args.out.empty()) write_params(args.out, m);
  print_autotune_history(buckets_per_step);
}

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse(argc, argv);
  check(kolo::init(), "init");
  const int rank = kolo::rank(), world = kolo::size();
  if (args.mode == "ckpt-failure") {
    run_ckpt_failure(args, rank);
  } else if (args.mode == "rank-zero") {
    run_rank_zero(args, world);
  } else if (args.mode == "rank-zero-set") {
    run_rank_zero_set(args, rank, world);
  } else if (args.mode == "broadcast") {
    Model m = make_model(1000 + rank);  // different on every rank
    fw::broadcast_parameters(m.named(), /*root=*/1 % world);
    write_params(args.out + "." + std::to_string(rank), m);
  } else {
    run_training(args, rank, world);
  }
  check(kolo::shutdown(), "shutdown");
  return 0;
} catch (const std::exception& e) {
  die(e.what());
}
