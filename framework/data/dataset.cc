#include "framework/data/dataset.h"

#include "framework/data/cifar_reader.h"
#include "framework/data/idx_reader.h"

namespace kolo::fw {
namespace {

[[noreturn]] void invalid(const std::string& msg) { throw Error(Status::InvalidArgument(msg)); }

std::string dims_to_string(const std::vector<int64_t>& dims) { return shape_to_string(dims); }

}  // namespace

ImageDataset::ImageDataset(std::vector<uint8_t> images, std::vector<int64_t> labels,
                           int64_t channels, int64_t height, int64_t width, std::vector<float> mean,
                           std::vector<float> std)
    : images_(std::move(images)),
      labels_(std::move(labels)),
      channels_(channels),
      height_(height),
      width_(width) {
  if (channels <= 0 || height <= 0 || width <= 0) {
    invalid("ImageDataset: channels, height and width must be > 0, got " +
            std::to_string(channels) + ", " + std::to_string(height) + ", " +
            std::to_string(width));
  }
  const int64_t per = channels * height * width;
  const auto n = static_cast<int64_t>(labels_.size());
  if (static_cast<int64_t>(images_.size()) != n * per) {
    invalid("ImageDataset: images hold " + std::to_string(images_.size()) + " bytes, expected " +
            std::to_string(n) + " labels x " + std::to_string(per) + " = " +
            std::to_string(n * per));
  }
  if (mean.size() != std.size() ||
      (!mean.empty() && static_cast<int64_t>(mean.size()) != channels)) {
    invalid("ImageDataset: mean and std must both be empty or hold " + std::to_string(channels) +
            " values, got " + std::to_string(mean.size()) + " and " + std::to_string(std.size()));
  }
  for (int64_t c = 0; c < channels; ++c) {
    const float m = mean.empty() ? 0.f : mean[static_cast<size_t>(c)];
    const float s = std.empty() ? 1.f : std[static_cast<size_t>(c)];
    if (!(s > 0))
      invalid("ImageDataset: std[" + std::to_string(c) + "] must be > 0, got " + std::to_string(s));
    scale_.push_back(1.f / (255.f * s));
    shift_.push_back(-m / s);
  }
}

Example ImageDataset::get(int64_t index) const {
  if (index < 0 || index >= size()) {
    invalid("ImageDataset::get: index must be in [0, " + std::to_string(size()) + "), got " +
            std::to_string(index));
  }
  Tensor x = Tensor::empty({channels_, height_, width_});
  float* out = x.data<float>();
  const int64_t plane = height_ * width_;
  const uint8_t* in = images_.data() + index * channels_ * plane;
  for (int64_t c = 0; c < channels_; ++c) {
    const float scale = scale_[static_cast<size_t>(c)], shift = shift_[static_cast<size_t>(c)];
    for (int64_t i = 0; i < plane; ++i) out[c * plane + i] = in[c * plane + i] * scale + shift;
  }
  return {std::move(x), labels_[static_cast<size_t>(index)]};
}

ImageDataset load_mnist(const std::string& images_path, const std::string& labels_path,
                        std::vector<float> mean, std::vector<float> std) {
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  const std::string files = "load_mnist('" + images_path + "', '" + labels_path + "'): ";
  if (images.type != IdxType::kUInt8 || images.dims.size() != 3) {
    invalid(files + "images must be uint8 [N, H, W], got " + idx_type_name(images.type) + " " +
            dims_to_string(images.dims));
  }
  if (labels.type != IdxType::kUInt8 || labels.dims.size() != 1) {
    invalid(files + "labels must be uint8 [N], got " + idx_type_name(labels.type) + " " +
            dims_to_string(labels.dims));
  }
  if (images.dims[0] != labels.dims[0]) {
    invalid(files +
            "the files disagree on the number of examples: " + std::to_string(images.dims[0]) +
            " images, " + std::to_string(labels.dims[0]) + " labels");
  }
  std::vector<int64_t> y(labels.data.begin(), labels.data.end());
  return ImageDataset(std::move(images.data), std::move(y), 1, images.dims[1], images.dims[2],
                      std::move(mean), std::move(std));
}

ImageDataset load_cifar10(const std::vector<std::string>& paths, std::vector<float> mean,
                          std::vector<float> std) {
  CifarArray a = read_cifar10(paths);
  std::vector<int64_t> y(a.labels.begin(), a.labels.end());
  return ImageDataset(std::move(a.images), std::move(y), 3, 32, 32, std::move(mean),
                      std::move(std));
}

}  // namespace kolo::fw
