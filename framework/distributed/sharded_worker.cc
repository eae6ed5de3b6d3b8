// One rank of the ZeRO equality tests (sharded_training_test.cc starts it through kolorun).
//
// A two-layer MLP (8 -> 16 -> 4, 212 parameters) trains for --steps steps on a fixed synthetic
// data set. Each step's global batch is the same 12 samples whatever the number of ranks, split
// UNEVENLY between ranks (4/8; 2/4/6; 2/2/4/4), so a sharded run equals the unsharded one only if
// the gradients are averaged weighted by sample counts.
//   --stage 0      the unsharded reference: must run on 1 rank; the wrapped optimizer steps on the
//                  whole batch (with --clip, the global-norm clipping done by hand first).
//   --stage 1|2    ShardedOptimizer (ZeRO stage 1 or 2) on every rank.
//   --optimizer    sgd (momentum 0.9, weight decay), nesterov, adam, adamw or lars; the biases
//                  form a second param group (no weight decay, half the learning rate).
//   --clip X       ShardedOptions::max_grad_norm (0: none).
//   --bucket-bytes N  (default 400: buckets {fc2.bias, fc2.weight, fc1.bias} and {fc1.weight}).
//   --passes k     each rank's share runs as k backward passes (backward_passes_per_step = k).
//   --compression fp16|bf16  DistributedOptions::compression (sharded and --dp runs).
//   --dp           DistributedOptimizer (unsharded) on every rank, the reference for runs whose
//                  result is not the one-rank run's (compression rounds each rank's gradient).
//   --on-set       the sharded ranks are the process set {1, ..., P-1}; rank 0 trains nothing
//                  and the set's rank 0 (global rank 1) writes --out.
//   --rank1-stage S  rank 1 asks for stage S instead (the agreement check must name 'stage');
//                  0: rank 1 runs DistributedOptimizer (unsharded) while the others shard.
//   --nosync       with --passes k: the first k - 1 passes inside no_sync() (their gradients are
//                  summed), backward_passes_per_step stays 1 (the reference sums k passes too).
//   --save-at K --ckpt P   save_sharded_checkpoint(P) after K steps (training goes on).
//   --resume-from-shards S --ckpt P   load_sharded_checkpoint(P, S) first; continue from its step.
//   --consolidate C        consolidate_checkpoint(C) at the end.
//   --device cuda  the model and the batches on cuda:<local rank mod GPUs> (several ranks may
//                  share one GPU: KOLO_GPU_OPERATIONS=tcp stages through the host); without a
//                  CUDA device it prints "no CUDA device" and exits 4 (the test then skips).
//   --need-gpus N  with --device cuda: likewise when fewer than N GPUs are visible (one per rank
//                  on the nccl backend).
//   --resume-unsharded C   load_checkpoint(C) (--stage 0) or load_unsharded_checkpoint(C)
//                          (stages 1, 2) first; continue from its step.
// A failed load prints "checkpoint failed: <status>", then "state unchanged" when the
// parameters, state slices and step counter are bit-identical to before, and exits 3.
// Rank 0 writes the parameters to --out ("name v v ..." lines). Every rank prints
// "memory state=<bytes> grads=<bytes> comm=<bytes> peak_comm=<bytes>
// allocator_state_peak=<bytes>" at the end (the last: memory_stats.h's peak of optimizer state).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/distributed/distributed_optimizer.h"
#include "framework/distributed/sharded_checkpoint.h"
#include "framework/distributed/sharded_optimizer.h"
#include "framework/functional.h"
#include "framework/memory_stats.h"
#include "framework/optim/adam.h"
#include "framework/optim/lars.h"
#include "framework/optim/serialize.h"
#include "framework/optim/sgd.h"
#include "kolo/kolo.h"

namespace fw = kolo::fw;

namespace {

constexpr int kSamples = 64;
constexpr int kFeatures = 8;
constexpr int kClasses = 4;
constexpr int kGlobalBatch = 12;

struct Args {
  int stage = 1;
  std::string optimizer = "sgd";
  double clip = 0;
  int64_t bucket_bytes = 400;
  int steps = 20;
  int passes = 1;
  bool nosync = false;
  int rank1_stage = -1;              // -1: as --stage
  std::string compression = "none";  // --compression none|fp16|bf16
  bool data_parallel = false;        // --dp: DistributedOptimizer on every rank (the reference)
  bool on_set = false;               // --on-set: ranks 1..P-1 train on a process set; rank 0 idles
  int hidden = 16;    // --hidden: another model (the checkpoint tests' "different model")
  bool cuda = false;  // --device cuda
  int need_gpus = 1;  // --need-gpus
  std::string out;
  std::string ckpt;         // --save-at / --resume: the sharded checkpoint's path
  int save_at = -1;         // save a sharded checkpoint after this many steps
  int saved_shards = 0;     // > 0: resume from the checkpoint that many ranks saved
  std::string consolidate;  // at the end, a consolidated (unsharded) checkpoint here
  std::string unsharded;    // --stage 0: resume from this unsharded checkpoint
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "sharded_worker: %s\n", message.c_str());
  std::exit(1);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + flag);
      return argv[++i];
    };
    if (flag == "--stage")
      a.stage = std::stoi(value());
    else if (flag == "--optimizer")
      a.optimizer = value();
    else if (flag == "--clip")
      a.clip = std::stod(value());
    else if (flag == "--bucket-bytes")
      a.bucket_bytes = std::stoll(value());
    else if (flag == "--steps")
      a.steps = std::stoi(value());
    else if (flag == "--passes")
      a.passes = std::stoi(value());
    else if (flag == "--nosync")
      a.nosync = true;
    else if (flag == "--compression")
      a.compression = value();
    else if (flag == "--dp")
      a.data_parallel = true;
    else if (flag == "--on-set")
      a.on_set = true;
    else if (flag == "--hidden")
      a.hidden = std::stoi(value());
    else if (flag == "--ckpt")
      a.ckpt = value();
    else if (flag == "--save-at")
      a.save_at = std::stoi(value());
    else if (flag == "--resume-from-shards")
      a.saved_shards = std::stoi(value());
    else if (flag == "--consolidate")
      a.consolidate = value();
    else if (flag == "--resume-unsharded")
      a.unsharded = value();
    else if (flag == "--rank1-stage")
      a.rank1_stage = std::stoi(value());
    else if (flag == "--out")
      a.out = value();
    else if (flag == "--device")
      a.cuda = value() == "cuda";
    else if (flag == "--need-gpus")
      a.need_gpus = std::stoi(value());
    else
      die("unknown flag " + flag);
  }
  return a;
}

std::vector<int> shares(int world) {
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
  kolo::Device device = kolo::Device::cpu();  // of the parameters and the batches
  fw::NamedTensors named() const {
    return {{"fc1.weight", w1}, {"fc1.bias", b1}, {"fc2.weight", w2}, {"fc2.bias", b2}};
  }
  fw::Tensor loss(const fw::Tensor& x, const fw::Tensor& y) const {
    return fw::cross_entropy(fw::linear(fw::relu(fw::linear(x, w1, b1)), w2, b2), y);
  }
};

// Drawn on the CPU (the same values whatever the device), then moved to `device`.
Model make_model(int hidden, kolo::Device device) {
  fw::Generator gen(7);
  Model m;
  m.device = device;
  m.w1 = fw::Tensor::randn({hidden, kFeatures}, 0.f, 0.4f, &gen);
  m.b1 = fw::Tensor::randn({hidden}, 0.f, 0.1f, &gen);
  m.w2 = fw::Tensor::randn({kClasses, hidden}, 0.f, 0.4f, &gen);
  m.b2 = fw::Tensor::randn({kClasses}, 0.f, 0.1f, &gen);
  for (auto* t : {&m.w1, &m.b1, &m.w2, &m.b2}) {
    *t = t->to(device);
    t->set_requires_grad(true);
  }
  return m;
}

// Rows [begin, begin + n) of the data set, wrapping around.
void batch(int begin, int n, fw::Tensor* x, fw::Tensor* y, kolo::Device device) {
  static const fw::Tensor all_x = [] {
    fw::Generator gen(123);
    return fw::Tensor::randn({kSamples, kFeatures}, 0.f, 1.f, &gen);
  }();
  std::vector<float> xs;
  std::vector<int64_t> ys;
  const float* data = all_x.data<float>();
  for (int i = 0; i < n; ++i) {
    const int row = (begin + i) % kSamples;
    xs.insert(xs.end(), data + row * kFeatures, data + (row + 1) * kFeatures);
    ys.push_back((row * 7) % kClasses);
  }
  *x = fw::Tensor::from_vector(xs, {n, kFeatures}, device);
  *y = fw::Tensor::from_labels(ys, device);
}

std::unique_ptr<fw::Optimizer> make_optimizer(const std::string& kind, const Model& m) {
  std::vector<fw::ParamGroup> groups(2);
  groups[0].params = {m.w1, m.w2};
  groups[1].params = {m.b1, m.b2};
  groups[1].lr_scale = 0.5;
  groups[1].weight_decay = 0.0;
  if (kind == "sgd")
    return std::make_unique<fw::SGD>(
        groups, fw::SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
  if (kind == "nesterov")
    return std::make_unique<fw::SGD>(
        groups, fw::SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
  if (kind == "adam")
    return std::make_unique<fw::Adam>(groups, fw::AdamOptions{.lr = 1e-2, .weight_decay = 1e-3});
  if (kind == "adamw")
    return std::make_unique<fw::AdamW>(groups, fw::AdamOptions{.lr = 1e-2, .weight_decay = 0.05});
  if (kind == "lars")
    return std::make_unique<fw::LARS>(
        groups, fw::LarsOptions{.lr = 0.5, .weight_decay = 1e-3, .trust_coefficient = 0.02});
  die("unknown optimizer " + kind);
}

fw::Compression compression_of(const std::string& name) {
  if (name == "none") return fw::Compression::kNone;
  if (name == "fp16") return fw::Compression::kFloat16;
  if (name == "bf16") return fw::Compression::kBFloat16;
  die("unknown compression " + name);
}

// DistributedOptimizer on every rank, the same data as run_sharded (one pass per step).
void run_data_parallel(const Args& a, Model& m, fw::Optimizer& inner, int rank, int world) {
  fw::DistributedOptions options{.compression = compression_of(a.compression),
                                 .bucket_bytes = a.bucket_bytes};
  fw::DistributedOptimizer opt(inner, m.named(), options);
  const std::vector<int> share = shares(world);
  int begin = 0;
  for (int r = 0; r < rank; ++r) begin += share[r];
  for (int step = 0; step < a.steps; ++step) {
    opt.zero_grad();
    fw::Tensor x, y;
    batch(step * kGlobalBatch + begin, share[rank], &x, &y, m.device);
    opt.set_local_batch_size(share[rank]);
    m.loss(x, y).backward();
    opt.step();
  }
}

void write_params(const std::string& path, const Model& m) {
  std::ofstream out(path);
  if (!out) die("cannot write " + path);
  out.precision(9);
  for (const auto& [name, t] : m.named()) {
    out << name;
    for (float v : t.to_vector()) out << ' ' << v;
    out << '\n';
  }
}

// The unsharded reference on one rank: the wrapped optimizer on the whole batch. With k passes
// each pass is a k-th of the batch: their mean (backward_passes_per_step) or, with --nosync,
// their sum (gradients accumulated under no_sync).
void run_reference(const Args& a, Model& m, fw::Optimizer& opt) {
  const int per_pass = kGlobalBatch / a.passes;
  for (int step = static_cast<int>(opt.step_count()); step < a.steps; ++step) {
    opt.zero_grad();
    for (int pass = 0; pass < a.passes; ++pass) {
      fw::Tensor x, y;
      batch(step * kGlobalBatch + pass * per_pass, per_pass, &x, &y, m.device);
      m.loss(x, y).backward();
    }
    std::vector<fw::Tensor> params = opt.parameters();
    if (!a.nosync && a.passes > 1)
      for (auto& p : params) p.grad().mul_(1.0f / static_cast<float>(a.passes));
    if (a.clip > 0) {
      double total = 0;
      for (auto& p : params) total += p.grad().sq_norm();
      const float coef = static_cast<float>(fw::clip_coefficient(total, a.clip));
      if (coef < 1.f)
        for (auto& p : params) p.grad().mul_(coef);
    }
    opt.step();
  }
}

// Every byte a failed load must leave as it was: the parameters, the state slices, the counters.
std::vector<float> snapshot(const Model& m, fw::ShardedOptimizer& opt) {
  std::vector<float> out;
  for (const auto& [name, t] : m.named()) {
    const std::vector<float> v = t.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  for (const fw::StateSlice& s : opt.state_slices())
    for (const fw::Tensor& t : s.slots) {
      const std::vector<float> v = t.to_vector();
      out.insert(out.end(), v.begin(), v.end());
    }
  out.push_back(static_cast<float>(opt.inner().step_count()));
  return out;
}

[[noreturn]] void checkpoint_failed(const kolo::Error& e, bool unchanged) {
  std::printf("checkpoint failed: %s\n%s\n", e.status().to_string().c_str(),
              unchanged ? "state unchanged" : "state CHANGED by the failed load");
  std::fflush(stdout);
  std::exit(3);
}

// The same passes of the same samples, spread over the ranks (each rank's share is split into
// the k passes as the reference splits the whole batch: the k-th pass of every rank together
// is the reference's k-th pass only when k = 1; with k > 1 the union is the same set of samples).
void run_sharded(const Args& a, Model& m, fw::ShardedOptimizer& opt, int rank, int world) {
  const std::vector<float> before = snapshot(m, opt);
  try {
    if (a.saved_shards > 0) fw::load_sharded_checkpoint(a.ckpt, a.saved_shards, m.named(), opt);
    if (!a.unsharded.empty()) fw::load_unsharded_checkpoint(a.unsharded, m.named(), opt);
  } catch (const kolo::Error& e) {
    checkpoint_failed(e, snapshot(m, opt) == before);
  }
  const std::vector<int> share = shares(world);
  int begin = 0;
  for (int r = 0; r < rank; ++r) begin += share[r];
  const int local = share[rank];
  const int per_pass = local / a.passes;
  for (int step = static_cast<int>(opt.inner().step_count()); step < a.steps; ++step) {
    if (step == a.save_at) fw::save_sharded_checkpoint(a.ckpt, m.named(), opt);
    opt.zero_grad();
    for (int pass = 0; pass < a.passes; ++pass) {
      fw::Tensor x, y;
      batch(step * kGlobalBatch + begin + pass * per_pass, per_pass, &x, &y, m.device);
      if (a.nosync && pass + 1 < a.passes) {
        fw::ShardedNoSyncScope scope = opt.no_sync();
        opt.set_local_batch_size(per_pass);
        m.loss(x, y).backward();
      } else {
        opt.set_local_batch_size(per_pass);
        m.loss(x, y).backward();
      }
    }
    opt.step();
  }
  if (!a.consolidate.empty()) fw::consolidate_checkpoint(a.consolidate, m.named(), opt);
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  if (a.cuda && fw::cuda_device_count() < a.need_gpus) {
    std::printf("sharded_worker: no CUDA device to run on (%d visible, --need-gpus %d)\n",
                fw::cuda_device_count(), a.need_gpus);
    return 4;
  }
  if (kolo::Status s = kolo::init(); !s.ok()) die("init: " + s.to_string());
  const int rank = kolo::rank(), world = kolo::size();
  const kolo::Device device = a.cuda
                                  ? kolo::Device::cuda(kolo::local_rank() % fw::cuda_device_count())
                                  : kolo::Device::cpu();
  Model m = make_model(a.hidden, device);
  std::unique_ptr<fw::Optimizer> inner = make_optimizer(a.optimizer, m);
  if (a.stage == 0) {
    if (world != 1) die("--stage 0 is the one-rank reference");
    if (!a.unsharded.empty()) fw::load_checkpoint(a.unsharded, m.named(), inner.get());
    run_reference(a, m, *inner);
  } else if (a.data_parallel || (rank == 1 && a.rank1_stage == 0)) {
    run_data_parallel(a, m, *inner, rank, world);
  } else if (a.on_set && rank == 0) {
    std::vector<int> others;
    for (int r = 1; r < world; ++r) others.push_back(r);
    if (auto set = kolo::add_process_set(others); !set.ok()) die(set.status().to_string());
  } else {
    fw::ShardedOptions options;
    int shard_rank = rank, shard_world = world;
    if (a.on_set) {
      std::vector<int> others;
      for (int r = 1; r < world; ++r) others.push_back(r);
      auto set = kolo::add_process_set(others);
      if (!set.ok()) die(set.status().to_string());
      options.distributed.process_set = *set;
      shard_rank = set->rank();
      shard_world = set->size();
    }
    const int stage = rank == 1 && a.rank1_stage >= 0 ? a.rank1_stage : a.stage;
    options.stage = stage == 2 ? fw::ShardStage::kGradients : fw::ShardStage::kOptimizerState;
    options.max_grad_norm = a.clip;
    options.distributed.bucket_bytes = a.bucket_bytes;
    options.distributed.compression = compression_of(a.compression);
    options.distributed.backward_passes_per_step = a.nosync ? 1 : a.passes;
    fw::ShardedOptimizer opt(*inner, m.named(), options);
    run_sharded(a, m, opt, shard_rank, shard_world);
    if (a.on_set && shard_rank == 0 && !a.out.empty()) write_params(a.out, m);
    const fw::ShardMemory mem = opt.memory();
    const int64_t state_peak =
        fw::memory_stats(device.kind).peak_of(fw::MemoryCategory::kOptimizerState);
    std::printf("memory state=%lld grads=%lld comm=%lld peak_comm=%lld allocator_state_peak=%lld\n",
                static_cast<long long>(mem.current.optimizer_state),
                static_cast<long long>(mem.current.gradients),
                static_cast<long long>(mem.current.communication),
                static_cast<long long>(mem.peak.communication), static_cast<long long>(state_peak));
    std::fflush(stdout);
  }
  if (rank == 0 && !a.on_set && !a.out.empty()) write_params(a.out, m);
  if (kolo::Status s = kolo::shutdown(); !s.ok()) die("shutdown: " + s.to_string());
  return 0;
} catch (const std::exception& e) {
  die(e.what());
}
