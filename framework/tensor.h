// Tensor: the n-dimensional array of the built-in training stack (namespace kolo::fw).
//
// A Tensor is a cheap handle (one shared_ptr) to a TensorImpl: shape + dtype + device + a
// contiguous, reference-counted Storage and an element offset into it. Copying a Tensor copies
// the handle, not the data (like torch.Tensor). Views (reshape, slice) share the storage.
//
// Element types: compute is float32. float16/bfloat16 exist as storage types so gradients can be
// compressed: to(DataType) converts between them and float32. int64 holds class labels.
// Devices: CPU, or CUDA ordinal N when built with KOLO_HAVE_CUDA. CUDA memory comes from a
// caching allocator (size-bucketed free lists), so freeing and reallocating a step's
// activations does not call cudaMalloc every step.
//
// Errors: misuse (shape mismatch, wrong dtype, wrong device, index out of range) throws
// kolo::Error carrying a Status (kInvalidArgument / kUnsupported) whose message names the
// operation and both values, e.g. "add: shapes [2, 3] and [3, 2] differ".
// Thread-safety: distinct Tensors may be used from distinct threads. One Tensor (or views of one
// storage) written from several threads at once is a data race, as for any array.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo::fw {

using Shape = std::vector<int64_t>;

// "[2, 3]".
std::string shape_to_string(const Shape& shape);
// Product of the dimensions (1 for a scalar, shape {}). Throws on a negative dimension.
int64_t shape_numel(const Shape& shape);

enum class MemoryCategory : uint8_t;  // memory_stats.h

// A contiguous block of memory on one device, freed (returned to its allocator) when the last
// reference goes. Never resized. Counted in memory_stats.h from allocation to release, under
// the allocating thread's MemoryCategoryScope until set_category moves it.
class Storage {
 public:
  // Allocates nbytes on device (uninitialised). Throws kolo::Error on failure / no CUDA build.
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Counts these bytes under `category` from now on. Thread-safe.
  void set_category(MemoryCategory category);
  MemoryCategory category() const { return category_.load(std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::atomic<MemoryCategory> category_;
};

// Seedable random source for randn/uniform/dropout. Deterministic for a given seed on CPU.
// Not thread-safe: use one Generator per thread.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x6b6f6c6f) : state_(seed) {}
  void seed(uint64_t s) { state_ = s; }
  uint64_t next_u64();   // splitmix64
  float next_uniform();  // [0, 1)
  float next_normal();   // N(0, 1), Box-Muller

  // The process-wide default generator used when a factory gets none. Not thread-safe.
  static Generator& default_generator();

 private:
  uint64_t state_;
};

struct AutogradMeta;  // autograd.h
class Tensor;
// Called with the final gradient of a parameter for this backward pass (see autograd.h).
using GradHook = std::function<void(Tensor& grad)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements of dtype
  Shape shape;
  DataType dtype = DataType::kFloat32;
  std::shared_ptr<AutogradMeta> autograd;  // null until requires_grad or produced by an op
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() == false; most accessors throw
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- Factories (float32 unless stated; CPU unless a device is given) ----
  static Tensor empty(const Shape& shape, Device device = Device::cpu(),
                      DataType dtype = DataType::kFloat32);
  static Tensor zeros(const Shape& shape, Device device = Device::cpu(),
                      DataType dtype = DataType::kFloat32);
  static Tensor ones(const Shape& shape, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  // values.size() must equal shape_numel(shape).
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            Device device = Device::cpu());
  // int64 tensor (class labels).
  static Tensor from_labels(const std::vector<int64_t>& labels, Device device = Device::cpu());
  static Tensor randn(const Shape& shape, float mean = 0.f, float stddev = 1.f,
                      Generator* gen = nullptr, Device device = Device::cpu());
  static Tensor uniform(const Shape& shape, float low = 0.f, float high = 1.f,
                        Generator* gen = nullptr, Device device = Device::cpu());

  // ---- Metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  DataType dtype() const;
  Device device() const;
  size_t nbytes() const;          // numel * dtype_size
  std::string to_string() const;  // "Tensor[2, 3] float32 cpu"

  // ---- Data access ----
  // Typed pointer to the first element. CPU only; T must match dtype (float for float32,
  // int64_t for int64, uint16_t for float16/bfloat16). Throws otherwise.
  template <typename T>
  T* data() const;
  // Untyped pointer on any device (device pointer for CUDA).
  void* raw_data() const;
  // Copy to a host float vector (any device, float dtypes converted).
  std::vector<float> to_vector() const;
  // The single value of a one-element tensor.
  float item() const;

  // ---- Conversions and views ----
  // Copy to device (a new tensor; returns *this-sharing handle when already there).
  Tensor to(Device device) const;
  // Convert element type: float32 <-> float16 / bfloat16 (and same-type copy).
  Tensor to(DataType dtype) const;
  Tensor clone() const;  // deep copy, same device/dtype, no autograd history
  // Same storage, new shape; numel must match. One dimension may be -1 (inferred).
  // Differentiable when *this requires grad.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) of the first dimension; shares storage (offset). Not differentiable:
  // intended for batching data and for views into flat gradient buffers.
  Tensor slice(int64_t begin, int64_t end) const;
  // Same data, no autograd history, requires_grad false.
  Tensor detach() const;
  // True when both handles point at the same TensorImpl.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  bool shares_storage(const Tensor& other) const;
  // Counts this tensor's storage (every view of it) under `category` (memory_stats.h).
  // Nothing for an undefined tensor.
  void set_memory_category(MemoryCategory category) const;

  // ---- In-place updates (no autograd; for optimizers, initialisation, gradient buffers) ----
  // Each works on CPU and CUDA; operands must have the same numel, device and float32 dtype.
  Tensor& fill_(float value);
  Tensor& zero_() { return fill_(0.f); }
  Tensor& copy_(const Tensor& src);                      // any dtype/device -> this dtype/device
  Tensor& add_(const Tensor& other, float alpha = 1.f);  // this += alpha * other
  Tensor& mul_(float value);                             // this *= value
  Tensor& mul_(const Tensor& other);                     // this *= other (elementwise)
  Tensor& addcmul_(const Tensor& a, const Tensor& b, float value);  // this += value*a*b
  // this += value * a / (sqrt(b) + eps): the Adam/RMSProp update.
  Tensor& addcdiv_sqrt_(const Tensor& a, const Tensor& b, float value, float eps);
  // this = alpha * this + beta * other (momentum/moving averages).
  Tensor& lerp_(const Tensor& other, float alpha, float beta);
  float sum() const;      // sum of all elements (float32), returned to host
  float sq_norm() const;  // sum of squares, returned to host

  // ---- Autograd (details and the hook contract in autograd.h) ----
  bool requires_grad() const;
  // Marks a leaf as a parameter whose gradient is accumulated. Throws on a non-leaf.
  Tensor& set_requires_grad(bool value);
  // The accumulated gradient (same shape/device), or an undefined Tensor before any backward.
  Tensor grad() const;
  // Sets the accumulated gradient buffer (e.g. a view into a flat fused buffer).
  void set_grad(const Tensor& grad) const;
  // Zeroes the gradient in place (keeps the buffer, so views into it stay valid).
  void zero_grad() const;
  // Registers a hook fired once per backward pass with this leaf's final gradient.
  // Returns an id for remove_grad_ready_hook. Leaf tensors that require grad only.
  int register_grad_ready_hook(GradHook hook) const;
  void remove_grad_ready_hook(int id) const;
  // Backpropagates from this tensor (a scalar unless grad_output is given). See autograd.h.
  void backward(const Tensor& grad_output = Tensor()) const;

  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Throws kolo::Error(InvalidArgument) "<op>: shapes A and B differ" unless equal.
void check_same_shape(const char* op, const Tensor& a, const Tensor& b);
// Throws unless both tensors live on the same device.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);

// Number of CUDA devices visible (0 in a CPU-only build or without a GPU). Never throws.
int cuda_device_count();

}  // namespace kolo::fw
