// framework_bench: single-process training throughput (samples/s) of the built-in stack on
// Fashion-MNIST-shaped random data (1x28x28, 10 classes), with plain SGD.
//   framework_bench --model mlp|cnn --steps N --batch B --device cpu|cuda --repeat R
// mlp: 784-512-256-10 with ReLU. cnn: conv(1->32,3,pad1)-relu-pool2, conv(32->64,3,pad1)-relu-
// pool2, linear(3136->128)-relu, linear(128->10). Two warm-up steps are not timed; then R timed
// rounds of N steps each print one line, and with R > 1 a last line gives the median round.
// cpu_samples_per_s divides by the process CPU time instead of wall time: on a shared machine it
// is the steadier number for single-threaded runs (with several BLAS threads it counts every
// thread, spinning ones included, so compare wall time there).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/kernels/cpu_kernels.h"
#include "framework/nn/layers.h"
#include "framework/nn/losses.h"

using namespace kolo::fw;

namespace {

std::shared_ptr<nn::Module> build(const std::string& model, Generator* g) {
  auto m = std::make_shared<nn::Sequential>();
  if (model == "mlp") {
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(784, 512, true, g));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(512, 256, true, g));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(256, 10, true, g));
  } else {
    m->push_back(std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1, true, g));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(2));
    m->push_back(std::make_shared<nn::Conv2d>(32, 64, 3, 1, 1, true, g));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::MaxPool2d>(2));
    m->push_back(std::make_shared<nn::Flatten>());
    m->push_back(std::make_shared<nn::Linear>(64 * 7 * 7, 128, true, g));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(128, 10, true, g));
  }
  return m;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

int usage() {
  std::fprintf(stderr,
               "usage: framework_bench [--model mlp|cnn] [--steps N] [--batch B] "
               "[--device cpu|cuda] [--repeat R]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp", device = "cpu";
  int steps = 20, batch = 128, repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--model")
      model = v;
    else if (a == "--steps")
      steps = std::stoi(v);
    else if (a == "--batch")
      batch = std::stoi(v);
    else if (a == "--device")
      device = v;
    else if (a == "--repeat")
      repeat = std::stoi(v);
    else
      return usage();
  }
  if ((model != "mlp" && model != "cnn") || (device != "cpu" && device != "cuda") || steps < 1 ||
      batch < 1 || repeat < 1)
    return usage();
  const kolo::Device dev = device == "cpu" ? kolo::Device::cpu() : kolo::Device::cuda(0);
  try {
    Generator gen(42);
    auto m = build(model, &gen);
    m->to(dev);
    Tensor x = Tensor::randn({batch, 1, 28, 28}, 0, 1, &gen, dev);
    std::vector<int64_t> labels(static_cast<size_t>(batch));
    for (auto& l : labels) l = static_cast<int64_t>(gen.next_u64() % 10);
    Tensor y = Tensor::from_labels(labels, dev);
    auto params = m->parameters();
    float loss = 0;
    auto step = [&] {
      Tensor l = cross_entropy((*m)(x), y);
      l.backward();
      for (Tensor& p : params) {
        p.add_(p.grad(), -0.01f);
        p.zero_grad();
      }
      loss = l.item();  // also synchronises a CUDA device
    };
    for (int i = 0; i < 2; ++i) step();
    const double samples = static_cast<double>(steps) * batch;
    std::vector<double> rates, cpu_rates;
    for (int r = 0; r < repeat; ++r) {
      const double c0 = process_cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) step();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double cpu = process_cpu_seconds() - c0;
      rates.push_back(samples / s);
      cpu_rates.push_back(samples / cpu);
      std::printf(
          "model=%s device=%s batch=%d steps=%d time_s=%.3f samples_per_s=%.1f "
          "cpu_samples_per_s=%.1f loss=%.4f blas=%s\n",
          model.c_str(), device.c_str(), batch, steps, s, rates.back(), cpu_rates.back(), loss,
          kernels::cpu::blas_core_name());
    }
    if (repeat > 1)
      std::printf(
          "model=%s device=%s batch=%d median_of=%d samples_per_s=%.1f "
          "cpu_samples_per_s=%.1f\n",
          model.c_str(), device.c_str(), batch, repeat, median(rates), median(cpu_rates));
  } catch (const kolo::Error& e) {
    std::fprintf(stderr, "framework_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
