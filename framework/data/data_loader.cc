#include "framework/data/data_loader.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <string>

#include "common/thread_annotations.h"

namespace kolo::fw {

struct DataLoader::Prefetch {
  Mutex mu;
  std::condition_variable cv;
  std::deque<Batch> queue KOLO_GUARDED_BY(mu);
  Status error KOLO_GUARDED_BY(mu);  // a failed batch of this epoch
  bool producer_done KOLO_GUARDED_BY(mu) = false;
  bool stop KOLO_GUARDED_BY(mu) = false;
};

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options,
                       std::unique_ptr<Sampler> sampler)
    : dataset_(dataset),
      options_(options),
      sampler_(std::move(sampler)),
      prefetch_(std::make_unique<Prefetch>()) {
  if (options.batch_size < 1) {
    throw Error(Status::InvalidArgument("DataLoader: batch_size must be >= 1, got " +
                                        std::to_string(options.batch_size)));
  }
  if (options.prefetch < 0) {
    throw Error(Status::InvalidArgument("DataLoader: prefetch must be >= 0, got " +
                                        std::to_string(options.prefetch)));
  }
  if (!sampler_) {
    if (options.shuffle) {
      sampler_ = std::make_unique<RandomSampler>(dataset.size(), options.seed);
    } else {
      sampler_ = std::make_unique<SequentialSampler>(dataset.size());
    }
  }
}

DataLoader::~DataLoader() { stop_thread(); }

void DataLoader::stop_thread() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(prefetch_->mu);
    prefetch_->stop = true;
  }
  prefetch_->cv.notify_all();
  thread_.join();
}

void DataLoader::start_epoch(int64_t epoch) {
  if (epoch < 0) {
    throw Error(
        Status::InvalidArgument("DataLoader: epoch must be >= 0, got " + std::to_string(epoch)));
  }
  // Ask the sampler first: if it throws, the current epoch (and its thread) stays intact.
  std::vector<int64_t> order = sampler_->indices(epoch);
  stop_thread();
  plan_.clear();
  const auto bs = static_cast<size_t>(options_.batch_size);
  for (size_t begin = 0; begin < order.size(); begin += bs) {
    const size_t end = std::min(order.size(), begin + bs);
    if (end - begin < bs && options_.drop_last) break;
    plan_.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(begin),
                       order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  epoch_ = epoch;
  next_batch_ = 0;
  taken_ = 0;
  {
    MutexLock lock(prefetch_->mu);
    prefetch_->queue.clear();
    prefetch_->error = Status::Ok();
    prefetch_->producer_done = false;
    prefetch_->stop = false;
  }
  if (options_.prefetch > 0) thread_ = std::thread([this] { produce(); });
}

Batch DataLoader::build(size_t batch_index) const {
  const std::vector<int64_t>& idx = plan_[batch_index];
  Batch batch;
  batch.indices = idx;
  std::vector<int64_t> labels;
  labels.reserve(idx.size());
  Shape example_shape;
  float* out = nullptr;
  int64_t per = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    const int64_t i = idx[k];
    if (i < 0 || i >= dataset_.size()) {
      throw Error(Status::InvalidArgument(
          "DataLoader: sampler index " + std::to_string(i) + " (epoch " + std::to_string(epoch_) +
          ", batch " + std::to_string(batch_index) + ") is outside the dataset [0, " +
          std::to_string(dataset_.size()) + ")"));
    }
    Example ex = dataset_.get(i);
    if (!ex.x.defined() || ex.x.dtype() != DataType::kFloat32 || !ex.x.device().is_cpu()) {
      throw Error(Status::InvalidArgument("DataLoader: example " + std::to_string(i) +
                                          " must be a defined float32 CPU tensor"));
    }
    if (k == 0) {
      example_shape = ex.x.shape();
      Shape shape = {static_cast<int64_t>(idx.size())};
      shape.insert(shape.end(), example_shape.begin(), example_shape.end());
      batch.x = Tensor::empty(shape);
      out = batch.x.data<float>();
      per = ex.x.numel();
    } else if (ex.x.shape() != example_shape) {
      throw Error(Status::InvalidArgument(
          "DataLoader: example " + std::to_string(i) + " has shape " +
          shape_to_string(ex.x.shape()) + ", but the batch's first example " +
          std::to_string(idx[0]) + " has shape " + shape_to_string(example_shape)));
    }
    std::memcpy(out + static_cast<int64_t>(k) * per, ex.x.data<float>(),
                static_cast<size_t>(per) * sizeof(float));
    labels.push_back(ex.y);
  }
  batch.y = Tensor::from_labels(labels);
  return batch;
}

// The error travels as a Status, not as an exception_ptr: the exception object then never
// crosses threads, and the caller gets the kolo::Error the contract promises.
void DataLoader::fail_epoch(Status status) {
  MutexLock lock(prefetch_->mu);
  prefetch_->error = std::move(status);
  prefetch_->producer_done = true;
  prefetch_->cv.notify_all();
}

void DataLoader::produce() {
  Prefetch& p = *prefetch_;
  for (size_t b = 0; b < plan_.size(); ++b) {
    {
      MutexLock lock(p.mu);
      p.cv.wait(lock.native(), [&]() KOLO_REQUIRES(p.mu) {
        return p.stop || static_cast<int64_t>(p.queue.size()) < options_.prefetch;
      });
      if (p.stop) return;
    }
    try {
      Batch batch = build(b);
      MutexLock lock(p.mu);
      p.queue.push_back(std::move(batch));
    } catch (const Error& e) {
      fail_epoch(e.status());
      return;
    } catch (const std::exception& e) {
      fail_epoch(Status::Internal(std::string("DataLoader: building batch ") + std::to_string(b) +
                                  " threw: " + e.what()));
      return;
    } catch (...) {
      fail_epoch(Status::Internal("DataLoader: building batch " + std::to_string(b) +
                                  " threw a non-standard exception"));
      return;
    }
    p.cv.notify_all();
  }
  MutexLock lock(p.mu);
  p.producer_done = true;
  p.cv.notify_all();
}

std::optional<Batch> DataLoader::next() {
  if (epoch_ < 0) {
    throw Error(Status::PreconditionFailed("DataLoader: next() called before start_epoch()"));
  }
  if (taken_ >= plan_.size()) return std::nullopt;
  if (options_.prefetch == 0) {
    Batch batch;
    try {
      batch = build(next_batch_);
    } catch (...) {
      taken_ = plan_.size();  // as with prefetch: the epoch ends with the error
      throw;
    }
    ++next_batch_;
    ++taken_;
    return batch;
  }
  Prefetch& p = *prefetch_;
  MutexLock lock(p.mu);
  p.cv.wait(lock.native(),
            [&]() KOLO_REQUIRES(p.mu) { return !p.queue.empty() || p.producer_done; });
  if (p.queue.empty()) {
    if (!p.error.ok()) {
      Status e = std::move(p.error);
      p.error = Status::Ok();
      taken_ = plan_.size();  // the epoch ends with the error
      throw Error(std::move(e));
    }
    return std::nullopt;
  }
  Batch batch = std::move(p.queue.front());
  p.queue.pop_front();
  ++taken_;
  lock.unlock();
  p.cv.notify_all();
  return batch;
}

DataLoader::Iterator DataLoader::begin() {
  start_epoch(epoch_ + 1);
  return Iterator(this);
}

}  // namespace kolo::fw
