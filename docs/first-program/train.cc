// A first data-parallel training program with Kolo (docs/first-program.md): a small MLP learns
// Fashion-MNIST on every rank that kolorun starts, each rank on its own share of the images.
//
//   kolorun -np 2 build/train [DATA_DIR]
#include <kolo/framework.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace fw = kolo::fw;
namespace nn = kolo::fw::nn;

// Kolo's core calls return a Status; the training stack throws kolo::Error. One way here.
void check(const kolo::Status& status) {
  if (!status.ok()) throw kolo::Error(status);
}

// The share of `images` whose highest logit is the right class.
double accuracy(nn::Module& model, const fw::ImageDataset& images) {
  fw::NoGradGuard no_grad;  // no backward here: record no graph
  fw::DataLoader loader(images, {.batch_size = 1000});
  int64_t correct = 0;
  for (fw::Batch& batch : loader) {
    const std::vector<float> logits = model.forward(batch.x).to_vector();
    for (int64_t i = 0; i < batch.x.size(0); ++i) {
      const float* row = logits.data() + i * 10;
      correct += std::max_element(row, row + 10) - row == batch.y.data<int64_t>()[i];
    }
  }
  return static_cast<double>(correct) / images.size();
}

int main(int argc, char** argv) try {
  check(kolo::init());       // rank and size come from kolorun
  const fw::RankLogger log;  // prints on rank 0 only

  // Fashion-MNIST as the Debian package dataset-fashion-mnist installs it, with the training
  // set's pixel mean and standard deviation.
  const std::string dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
  const fw::ImageDataset train = fw::load_mnist(
      dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz", {0.286f}, {0.353f});
  const fw::ImageDataset test = fw::load_mnist(
      dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz", {0.286f}, {0.353f});
  // Each rank takes its own shard of every epoch's shuffled order.
  fw::DataLoader loader(train, {.batch_size = 64},
                        std::make_unique<fw::DistributedSampler>(train.size(), kolo::rank(),
                                                                 kolo::size(), /*seed=*/1));

  // 784 pixels -> 128 hidden units -> 10 classes. Every rank starts from rank 0's weights.
  fw::Generator gen(42);
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Flatten>());
  model.push_back(std::make_shared<nn::Linear>(784, 128, /*bias=*/true, &gen));
  model.push_back(std::make_shared<nn::ReLU>());
  model.push_back(std::make_shared<nn::Linear>(128, 10, /*bias=*/true, &gen));
  fw::broadcast_parameters(model.named_parameters());

  // The global batch is 64 per rank, so the learning rate grows with the number of ranks.
  fw::SGD sgd(model.parameters(),
              {.lr = fw::scale_lr(0.05, kolo::size(), fw::LrScaling::kLinear), .momentum = 0.9});
  fw::DistributedOptimizer opt(sgd, model.named_parameters());

  log.printf("%d rank(s) share the %lld training images of every epoch", kolo::size(),
             static_cast<long long>(train.size()));
  for (int epoch = 1; epoch <= 2; ++epoch) {
    double loss_sum = 0;
    int64_t steps = 0;
    for (fw::Batch& batch : loader) {  // the next epoch, reshuffled
      opt.zero_grad();
      opt.set_local_batch_size(batch.x.size(0));
      fw::Tensor loss = fw::cross_entropy(model.forward(batch.x), batch.y);
      loss.backward();  // each gradient's allreduce starts as soon as it is ready
      opt.step();       // waits for them: the average over every rank's samples, then SGD
      loss_sum += loss.item();
      ++steps;
    }
    log.printf("epoch %d: %lld steps per rank, mean loss on rank 0 %.3f", epoch,
               static_cast<long long>(steps), loss_sum / steps);
  }
  // Every rank holds the same model now; rank 0 tests it.
  if (kolo::rank() == 0) log.printf("test accuracy %.3f", accuracy(model, test));
  check(kolo::shutdown());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train: %s\n", e.what());
  (void)kolo::shutdown();  // tells the other ranks at once
  return 1;
}
