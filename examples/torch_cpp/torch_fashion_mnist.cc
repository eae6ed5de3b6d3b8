// Data-parallel Fashion-MNIST in LibTorch with Kolo: the main job's CNN (examples/
// train_fashion_mnist: conv 16, conv 32, fc 128, fc 10) and SGD with momentum. The Kolo lines
// are marked "// Kolo". Run: kolorun -np 2 build/bin/torch_fashion_mnist [--epochs N]
// [--batch-size N] [--lr X] [--max-steps N] [--test-subset N] [--data-dir D]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/data/idx_reader.h"
#include "kolo/torch.h"  // Kolo

namespace nn = torch::nn;

struct CnnImpl : nn::Module {
  nn::Conv2d conv1{nn::Conv2dOptions(1, 16, 3).padding(1)};
  nn::Conv2d conv2{nn::Conv2dOptions(16, 32, 3).padding(1)};
  nn::Linear fc1{32 * 7 * 7, 128}, fc2{128, 10};
  CnnImpl() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
};
TORCH_MODULE(Cnn);

// Images [N, 1, 28, 28] scaled to [0, 1] and labels [N] from Debian's gzip'd IDX files.
std::pair<torch::Tensor, torch::Tensor> load(const std::string& dir, const std::string& split) {
  kolo::fw::IdxArray images = kolo::fw::read_idx(dir + "/" + split + "-images-idx3-ubyte.gz");
  kolo::fw::IdxArray labels = kolo::fw::read_idx(dir + "/" + split + "-labels-idx1-ubyte.gz");
  const int64_t n = images.dims[0];
  torch::Tensor x = torch::from_blob(images.data.data(), {n, 1, 28, 28}, torch::kUInt8)
                        .to(torch::kFloat)
                        .div_(255);
  torch::Tensor y = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kLong);
  return {x, y};
}

struct Options {
  int epochs = 1, batch = 64, max_steps = -1, test_subset = 0;
  double lr = 0.05;
  std::string dir = "/usr/share/datasets/fashion-mnist";
};

// The whole of `v` as a number (std::stoi and std::stod accept "12x" and say only "stoi").
template <typename T>
T number(const std::string& option, const std::string& v) {
  size_t used = 0;
  T x{};
  try {
    if constexpr (std::is_integral_v<T>) {
      x = std::stoi(v, &used);
    } else {
      x = std::stod(v, &used);
    }
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used == 0 || used != v.size())
    throw std::invalid_argument(option + ": expected a number, got '" + v + "'");
  return x;
}

// Throws std::invalid_argument naming an unknown option or a bad value.
Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--epochs")
      o.epochs = number<int>(a, v);
    else if (a == "--batch-size")
      o.batch = number<int>(a, v);
    else if (a == "--lr")
      o.lr = number<double>(a, v);
    else if (a == "--max-steps")
      o.max_steps = number<int>(a, v);
    else if (a == "--test-subset")
      o.test_subset = number<int>(a, v);
    else if (a == "--data-dir")
      o.dir = v;
    else
      throw std::invalid_argument("unknown option " + a);
  }
  return o;
}

// Each rank classifies its slice of the first `subset` test images (all when 0); the counts are
// summed over the ranks.
double test_accuracy(Cnn& model, const torch::Tensor& x, const torch::Tensor& y, int64_t subset) {
  torch::NoGradGuard no_grad;
  const int rank = kolo::torch::rank(), size = kolo::torch::size();
  const int64_t n = subset > 0 ? std::min<int64_t>(subset, x.size(0)) : x.size(0);
  const int64_t lo = n * rank / size, hi = n * (rank + 1) / size;
  torch::Tensor correct = model->forward(x.slice(0, lo, hi)).argmax(1).eq(y.slice(0, lo, hi)).sum();
  kolo::torch::allreduce_("test.correct", correct);  // Kolo
  return correct.item<double>() / static_cast<double>(n);
}

void train(const Options& o) {
  const int size = kolo::torch::size();
  auto [train_x, train_y] = load(o.dir, "train");
  auto [test_x, test_y] = load(o.dir, "t10k");
  torch::manual_seed(42);
  Cnn model;
  kolo::torch::broadcast_parameters(*model);  // Kolo: every rank starts from rank 0's weights
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(o.lr * size).momentum(0.9));  // Kolo: lr * size
  kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters());       // Kolo
  auto sampler = kolo::torch::make_random_sampler(train_x.size(0));  // Kolo: this rank's share
  int64_t steps = 0;
  double step_seconds = 0;
  for (int epoch = 0; epoch < o.epochs && steps != o.max_steps; ++epoch) {
    sampler->set_epoch(epoch);
    sampler->reset();
    double loss_sum = 0;
    int64_t batches = 0;
    while (auto indices = sampler->next(o.batch)) {
      if (steps == o.max_steps) break;
      const auto start = std::chrono::steady_clock::now();
      torch::Tensor idx = torch::tensor(std::vector<int64_t>(indices->begin(), indices->end()));
      opt.zero_grad();
      opt.set_local_batch_size(idx.size(0));  // Kolo: exact averaging of uneven batches
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          model->forward(train_x.index_select(0, idx)), train_y.index_select(0, idx));
      loss.backward();
      opt.step();  // Kolo: waits for the gradients' allreduces, then steps
      loss_sum += loss.item<double>();
      ++batches;
      if (++steps > 5) {  // the first steps warm up
        step_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
    const double accuracy = test_accuracy(model, test_x, test_y, o.test_subset);
    if (kolo::torch::rank() == 0) {
      std::printf("epoch %d: train loss %.4f, test accuracy %.4f\n", epoch,
                  loss_sum / std::max<int64_t>(batches, 1), accuracy);
    }
  }
  if (kolo::torch::rank() == 0 && steps > 5) {
    std::printf("step_time_ms %.3f over %lld steps\n", 1e3 * step_seconds / (steps - 5),
                static_cast<long long>(steps - 5));
  }
}

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_fashion_mnist: %s\n", e.what());
    return 2;
  }
  torch::set_num_threads(1);
  try {
    kolo::torch::init();  // Kolo
    train(options);
    kolo::torch::shutdown();  // Kolo
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_fashion_mnist: %s\n", e.what());
    return 1;
  }
  return 0;
}
