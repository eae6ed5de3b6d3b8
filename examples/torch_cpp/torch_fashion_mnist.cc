// Data-parallel Fashion-MNIST in LibTorch with Kolo: the main job's CNN (examples/
// train_fashion_mnist: conv 16, conv 32, fc 128, fc 10) and SGD with momentum. The Kolo lines
// are marked "// Kolo". Run: kolorun -np 2 build/bin/torch_fashion_mnist [--epochs N]
// [--batch-size N] [--lr X] [--max-steps N] [--test-subset N] [--data-dir D]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

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

int main(int argc, char** argv) {
  int epochs = 1, batch = 64, max_steps = -1, test_subset = 0;
  double lr = 0.05;
  std::string dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--epochs")
      epochs = std::stoi(v);
    else if (a == "--batch-size")
      batch = std::stoi(v);
    else if (a == "--lr")
      lr = std::stod(v);
    else if (a == "--max-steps")
      max_steps = std::stoi(v);
    else if (a == "--test-subset")
      test_subset = std::stoi(v);
    else if (a == "--data-dir")
      dir = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  torch::set_num_threads(1);
  try {
    kolo::torch::init();  // Kolo
    const int rank = kolo::torch::rank(), size = kolo::torch::size();
    auto [train_x, train_y] = load(dir, "train");
    auto [test_x, test_y] = load(dir, "t10k");
    torch::manual_seed(42);
    Cnn model;
    kolo::torch::broadcast_parameters(*model);  // Kolo: every rank starts from rank 0's weights
    torch::optim::SGD sgd(model->parameters(),
                          torch::optim::SGDOptions(lr * size).momentum(0.9));  // Kolo: lr * size
    kolo::torch::DistributedOptimizer opt(sgd, model->named_parameters());     // Kolo
    auto sampler = kolo::torch::make_random_sampler(train_x.size(0));  // Kolo: this rank's share
    int64_t steps = 0;
    double step_seconds = 0;
    for (int epoch = 0; epoch < epochs && steps != max_steps; ++epoch) {
      sampler->set_epoch(epoch);
      sampler->reset();
      double loss_sum = 0;
      int64_t batches = 0;
      while (auto indices = sampler->next(batch)) {
        if (steps == max_steps) break;
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
      torch::NoGradGuard no_grad;
      const int64_t n =
          test_subset > 0 ? std::min<int64_t>(test_subset, test_x.size(0)) : test_x.size(0);
      const int64_t lo = n * rank / size, hi = n * (rank + 1) / size;
      torch::Tensor correct =
          model->forward(test_x.slice(0, lo, hi)).argmax(1).eq(test_y.slice(0, lo, hi)).sum();
      kolo::torch::allreduce_("test.correct", correct);  // Kolo
      if (rank == 0) {
        std::printf("epoch %d: train loss %.4f, test accuracy %.4f\n", epoch,
                    loss_sum / std::max<int64_t>(batches, 1),
                    correct.item<double>() / static_cast<double>(n));
      }
    }
    if (rank == 0 && steps > 5) {
      std::printf("step_time_ms %.3f over %lld steps\n", 1e3 * step_seconds / (steps - 5),
                  static_cast<long long>(steps - 5));
    }
    kolo::torch::shutdown();  // Kolo
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_fashion_mnist: %s\n", e.what());
    return 1;
  }
  return 0;
}
