// Dataset: random access to labelled examples, the input of DataLoader.
//
// Contract: size() is fixed for the dataset's lifetime; get(i) for i in [0, size()) returns a
// CPU tensor whose shape is the same for every i (the DataLoader stacks them into a batch).
// get() is called from the DataLoader's prefetch thread, concurrently with the caller's use of
// other objects, so implementations must make a const get() safe to call from another thread
// (the datasets here only read immutable arrays).
// Errors: get() throws kolo::Error(InvalidArgument) for an index out of range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace kolo::fw {

struct Example {
  Tensor x;       // one input, e.g. float32 [C, H, W]
  int64_t y = 0;  // class label
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
};

// Images stored as uint8 [N, C, H, W] with labels, converted on access to float32 [C, H, W]:
//   x = (pixel / 255 - mean[c]) / std[c]
// Keeping bytes (4x smaller than floats) and converting in get() puts the conversion on the
// prefetch thread, off the training loop's path.
class ImageDataset : public Dataset {
 public:
  // images.size() must be N*C*H*W and labels.size() N; mean/std are empty (no normalisation)
  // or hold C values with std > 0. Throws InvalidArgument naming the mismatch.
  ImageDataset(std::vector<uint8_t> images, std::vector<int64_t> labels, int64_t channels,
               int64_t height, int64_t width, std::vector<float> mean = {},
               std::vector<float> std = {});
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Example get(int64_t index) const override;
  Shape example_shape() const { return {channels_, height_, width_}; }
  const std::vector<int64_t>& labels() const { return labels_; }

 private:
  std::vector<uint8_t> images_;
  std::vector<int64_t> labels_;
  int64_t channels_, height_, width_;
  std::vector<float> scale_;  // per channel: 1 / (255 * std)
  std::vector<float> shift_;  // per channel: -mean / std
};

// MNIST / Fashion-MNIST from an IDX image file (uint8 [N, H, W]) and label file (uint8 [N]),
// gzip or raw: examples are float32 [1, H, W]. Throws (see idx_reader.h) for malformed files,
// and InvalidArgument naming both files when the images are not uint8 [N, H, W], the labels not
// uint8 [N], or the two N differ.
ImageDataset load_mnist(const std::string& images_path, const std::string& labels_path,
                        std::vector<float> mean = {}, std::vector<float> std = {});

// CIFAR-10 from one or more binary batch files: examples are float32 [3, 32, 32].
ImageDataset load_cifar10(const std::vector<std::string>& paths, std::vector<float> mean = {},
                          std::vector<float> std = {});

}  // namespace kolo::fw
