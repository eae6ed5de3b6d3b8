#include "framework/tensor.h"

#include <malloc.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "framework/autograd.h"
#include "framework/kernels/cpu_kernels.h"
#include "framework/memory_stats.h"
#ifdef KOLO_HAVE_CUDA
#include "framework/kernels/cuda_allocator.h"
#include "framework/kernels/cuda_kernels.h"
#endif

namespace kolo::fw {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error(Status::InvalidArgument(msg)); }

[[noreturn, maybe_unused]] void no_cuda(const char* op) {
  throw Error(
      Status::Unsupported(std::string(op) + ": CUDA tensors need a build with KOLO_HAVE_CUDA"));
}

Tensor make(const Shape& shape, Device device, DataType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  impl->storage = std::make_shared<Storage>(nbytes, device);
  return Tensor(std::move(impl));
}

void check_f32(const char* op, const Tensor& t) {
  if (t.dtype() != DataType::kFloat32)
    fail(std::string(op) + ": expected a float32 tensor, got " +
         std::string(dtype_name(t.dtype())));
}

void check_operand(const char* op, const Tensor& self, const Tensor& other) {
  if (!other.defined()) fail(std::string(op) + ": operand is an undefined tensor");
  check_f32(op, self);
  check_f32(op, other);
  check_same_device(op, self, other);
  if (self.numel() != other.numel())
    fail(std::string(op) + ": shapes " + shape_to_string(self.shape()) + " and " +
         shape_to_string(other.shape()) + " have different sizes");
}

float* fptr(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

// Copies bytes between any two devices.
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  if (n == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
#ifdef KOLO_HAVE_CUDA
  if (dst_dev.is_cuda() && src_dev.is_cpu()) {
    kernels::cuda::set_device(dst_dev.index);
    kernels::cuda::copy_h2d(dst, src, n);
  } else if (dst_dev.is_cpu()) {
    kernels::cuda::set_device(src_dev.index);
    kernels::cuda::copy_d2h(dst, src, n);
  } else {
    // cudaMemcpy with the default (unified) address space handles peer copies too.
    kernels::cuda::set_device(dst_dev.index);
    kernels::cuda::copy_d2d(dst, src, n);
  }
#else
  no_cuda("copy");
#endif
}

}  // namespace

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("shape " + shape_to_string(shape) + ": dimensions must be >= 0");
    n *= d;
  }
  return n;
}

// ---------------------------------------------------------------- Storage
namespace {
// glibc gives freed heap tops back to the OS and serves big blocks with fresh mmaps; a training
// step frees all of its activations, so every step would page-fault them back in.
void keep_freed_cpu_memory() {
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)once;
}
}  // namespace

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), category_(memory_stats_detail::current_category()) {
  if (device.is_cpu()) {
    keep_freed_cpu_memory();
    // 64-byte alignment keeps AVX loads aligned and matches what OpenBLAS prefers.
    data_ = ::operator new(nbytes == 0 ? 64 : (nbytes + 63) / 64 * 64, std::align_val_t(64));
    memory_stats_detail::add(device.kind, category(), static_cast<int64_t>(nbytes));
    return;
  }
#ifdef KOLO_HAVE_CUDA
  if (device.index < 0 || device.index >= kernels::cuda::device_count())
    throw Error(Status::InvalidArgument(
        "Storage: device " + device.to_string() + " does not exist (" +
        std::to_string(kernels::cuda::device_count()) + " CUDA devices visible)"));
  data_ = cuda_alloc::allocate(nbytes, device.index);
  memory_stats_detail::add(device.kind, category(), static_cast<int64_t>(nbytes));
#else
  no_cuda("Storage");
#endif
}

Storage::~Storage() {
  memory_stats_detail::add(device_.kind, category(), -static_cast<int64_t>(nbytes_));
  if (device_.is_cpu()) {
    ::operator delete(data_, std::align_val_t(64));
    return;
  }
#ifdef KOLO_HAVE_CUDA
  cuda_alloc::release(data_, nbytes_, device_.index);
#endif
}

void Storage::set_category(MemoryCategory category) {
  const MemoryCategory was = category_.exchange(category, std::memory_order_relaxed);
  memory_stats_detail::move(device_.kind, was, category, static_cast<int64_t>(nbytes_));
}

int cuda_device_count() {
#ifdef KOLO_HAVE_CUDA
  return kernels::cuda::device_count();
#else
  return 0;
#endif
}

// ---------------------------------------------------------------- Generator
uint64_t Generator::next_u64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
float Generator::next_uniform() {
  return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f);  // 24 random bits
}
float Generator::next_normal() {
  float u1 = next_uniform();
  const float u2 = next_uniform();
  if (u1 < 1e-12f) u1 = 1e-12f;
  return std::sqrt(-2.f * std::log(u1)) * std::cos(6.2831853f * u2);
}
Generator& Generator::default_generator() {
  static Generator g;
  return g;
}

// ---------------------------------------------------------------- factories
Tensor Tensor::empty(const Shape& shape, Device device, DataType dtype) {
  return make(shape, device, dtype);
}
Tensor Tensor::zeros(const Shape& shape, Device device, DataType dtype) {
  Tensor t = make(shape, device, dtype);
  if (device.is_cpu()) {
    std::memset(t.raw_data(), 0, t.nbytes());
  } else if (dtype == DataType::kFloat32) {
    t.fill_(0.f);
  } else {
    t.copy_(zeros(shape, Device::cpu(), dtype));
  }
  return t;
}
Tensor Tensor::ones(const Shape& shape, Device device) { return full(shape, 1.f, device); }
Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = make(shape, device, DataType::kFloat32);
  t.fill_(value);
  return t;
}
Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, Device device) {
  const int64_t n = shape_numel(shape);
  if (static_cast<int64_t>(values.size()) != n)
    fail("from_vector: shape " + shape_to_string(shape) + " needs " + std::to_string(n) +
         " values, got " + std::to_string(values.size()));
  Tensor t = make(shape, device, DataType::kFloat32);
  copy_bytes(t.raw_data(), device, values.data(), Device::cpu(), t.nbytes());
  return t;
}
Tensor Tensor::from_labels(const std::vector<int64_t>& labels, Device device) {
  Tensor t = make({static_cast<int64_t>(labels.size())}, device, DataType::kInt64);
  copy_bytes(t.raw_data(), device, labels.data(), Device::cpu(), t.nbytes());
  return t;
}
Tensor Tensor::randn(const Shape& shape, float mean, float stddev, Generator* gen, Device device) {
  Generator& g = gen ? *gen : Generator::default_generator();
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = mean + stddev * g.next_normal();
  return from_vector(v, shape, device);
}
Tensor Tensor::uniform(const Shape& shape, float low, float high, Generator* gen, Device device) {
  Generator& g = gen ? *gen : Generator::default_generator();
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = low + (high - low) * g.next_uniform();
  return from_vector(v, shape, device);
}

// ---------------------------------------------------------------- metadata
static const TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl) {
  if (!impl) fail("tensor: use of an undefined Tensor");
  return *impl;
}
const Shape& Tensor::shape() const { return checked(impl_).shape; }
int64_t Tensor::size(int64_t d) const {
  const int64_t nd = dim();
  const int64_t i = d < 0 ? d + nd : d;
  if (i < 0 || i >= nd)
    fail("size: dimension " + std::to_string(d) + " out of range for shape " +
         shape_to_string(shape()));
  return shape()[static_cast<size_t>(i)];
}
int64_t Tensor::numel() const { return shape_numel(shape()); }
DataType Tensor::dtype() const { return checked(impl_).dtype; }
Device Tensor::device() const { return checked(impl_).storage->device(); }
size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  return "Tensor" + shape_to_string(shape()) + " " + std::string(dtype_name(dtype())) + " " +
         device().to_string();
}

void* Tensor::raw_data() const {
  const TensorImpl& t = checked(impl_);
  return static_cast<char*>(t.storage->data()) +
         t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

template <typename T>
static bool dtype_matches(DataType d) {
  if constexpr (std::is_same_v<T, float>) return d == DataType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return d == DataType::kFloat64;
  if constexpr (std::is_same_v<T, int64_t>) return d == DataType::kInt64;
  if constexpr (std::is_same_v<T, int32_t>) return d == DataType::kInt32;
  if constexpr (std::is_same_v<T, uint16_t>)
    return d == DataType::kFloat16 || d == DataType::kBFloat16;
  if constexpr (std::is_same_v<T, uint8_t>) return d == DataType::kUInt8;
  return false;
}

template <typename T>
T* Tensor::data() const {
  if (!device().is_cpu())
    fail("data<T>: tensor is on " + device().to_string() + "; call to(Device::cpu()) first");
  if (!dtype_matches<T>(dtype()))
    fail("data<T>: element type does not match the tensor's dtype " +
         std::string(dtype_name(dtype())));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template int32_t* Tensor::data<int32_t>() const;
template uint16_t* Tensor::data<uint16_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;

std::vector<float> Tensor::to_vector() const {
  Tensor c = to(Device::cpu());
  if (c.dtype() != DataType::kFloat32) c = c.to(DataType::kFloat32);
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

float Tensor::item() const {
  if (numel() != 1)
    fail("item: tensor of shape " + shape_to_string(shape()) + " has " + std::to_string(numel()) +
         " elements, expected 1");
  return to_vector()[0];
}

// ---------------------------------------------------------------- conversions and views
Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = make(shape(), device, dtype());
  copy_bytes(out.raw_data(), device, raw_data(), this->device(), nbytes());
  return out;
}

Tensor Tensor::to(DataType target) const {
  const DataType src = dtype();
  if (src == target) return clone();
  const bool ok =
      (src == DataType::kFloat32 &&
       (target == DataType::kFloat16 || target == DataType::kBFloat16)) ||
      (target == DataType::kFloat32 && (src == DataType::kFloat16 || src == DataType::kBFloat16));
  if (!ok)
    throw Error(Status::Unsupported("to(dtype): conversion " + std::string(dtype_name(src)) +
                                    " -> " + std::string(dtype_name(target)) +
                                    " is not supported (float32 <-> float16/bfloat16 only)"));
  const int64_t n = numel();
#ifdef KOLO_HAVE_CUDA
  if (device().is_cuda()) {
    // On the device: a gradient compressed for a GPU allreduce never leaves the GPU. The CUDA
    // cast kernels must round as the host ones do (kolo/float16.h): cuda_test compares them
    // bit for bit (it has not run on a GPU yet).
    kernels::cuda::set_device(device().index);
    Tensor out = make(shape(), device(), target);
    const void* x = raw_data();
    void* y = out.raw_data();
    using namespace kernels::cuda;
    if (target == DataType::kFloat16)
      f32_to_f16(n, static_cast<const float*>(x), static_cast<uint16_t*>(y));
    if (target == DataType::kBFloat16)
      f32_to_bf16(n, static_cast<const float*>(x), static_cast<uint16_t*>(y));
    if (src == DataType::kFloat16)
      f16_to_f32(n, static_cast<const uint16_t*>(x), static_cast<float*>(y));
    if (src == DataType::kBFloat16)
      bf16_to_f32(n, static_cast<const uint16_t*>(x), static_cast<float*>(y));
    return out;
  }
#endif
  // Converted on the host for CPU tensors, with the rounding rules of kolo/float16.h.
  Tensor host = to(Device::cpu());
  Tensor out = make(shape(), Device::cpu(), target);
  using namespace kernels::cpu;
  if (target == DataType::kFloat16) f32_to_f16(n, host.data<float>(), out.data<uint16_t>());
  if (target == DataType::kBFloat16) f32_to_bf16(n, host.data<float>(), out.data<uint16_t>());
  if (src == DataType::kFloat16) f16_to_f32(n, host.data<uint16_t>(), out.data<float>());
  if (src == DataType::kBFloat16) bf16_to_f32(n, host.data<uint16_t>(), out.data<float>());
  return out.to(device());
}

Tensor Tensor::clone() const {
  Tensor out = make(shape(), device(), dtype());
  copy_bytes(out.raw_data(), device(), raw_data(), device(), nbytes());
  return out;
}

namespace {
class ReshapeNode : public Node {
 public:
  explicit ReshapeNode(Shape in_shape) : in_shape_(std::move(in_shape)) {}
  std::vector<Tensor> backward(const Tensor& g) override { return {g.reshape(in_shape_)}; }
  const char* name() const override { return "Reshape"; }

 private:
  Shape in_shape_;
};
}  // namespace

Tensor Tensor::reshape(const Shape& new_shape) const {
  Shape s = new_shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) fail("reshape: more than one -1 in " + shape_to_string(new_shape));
      infer = static_cast<int>(i);
    } else if (s[i] < 0) {
      fail("reshape: invalid dimension in " + shape_to_string(new_shape));
    } else {
      known *= s[i];
    }
  }
  const int64_t n = numel();
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      fail("reshape: cannot view " + shape_to_string(shape()) + " as " +
           shape_to_string(new_shape));
    s[static_cast<size_t>(infer)] = n / known;
  }
  if (shape_numel(s) != n)
    fail("reshape: cannot view " + shape_to_string(shape()) + " (" + std::to_string(n) +
         " elements) as " + shape_to_string(new_shape));
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->shape = s;
  impl->autograd.reset();
  Tensor out(std::move(impl));
  record(out, std::make_shared<ReshapeNode>(shape()), {*this});
  return out;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  if (dim() == 0) fail("slice: cannot slice a scalar tensor");
  const int64_t rows = shape()[0];
  if (begin < 0 || end < begin || end > rows)
    fail("slice: range [" + std::to_string(begin) + ", " + std::to_string(end) +
         ") is invalid for first dimension " + std::to_string(rows));
  const int64_t row_elems = rows == 0 ? 0 : numel() / rows;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->dtype = impl_->dtype;
  impl->shape = shape();
  impl->shape[0] = end - begin;
  impl->offset = impl_->offset + begin * row_elems;
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>(checked(impl_));
  impl->autograd.reset();
  return Tensor(std::move(impl));
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    fail(std::string(op) + ": shapes " + shape_to_string(a.shape()) + " and " +
         shape_to_string(b.shape()) + " differ");
}
void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (!(a.device() == b.device()))
    fail(std::string(op) + ": tensors are on different devices (" + a.device().to_string() +
         " and " + b.device().to_string() + ")");
}

// ---------------------------------------------------------------- in-place
#ifdef KOLO_HAVE_CUDA
#define KOLO_FW_DISPATCH(dev, call)           \
  do {                                        \
    if ((dev).is_cpu()) {                     \
      kernels::cpu::call;                     \
    } else {                                  \
      kernels::cuda::set_device((dev).index); \
      kernels::cuda::call;                    \
    }                                         \
  } while (0)
#else
#define KOLO_FW_DISPATCH(dev, call) \
  do {                              \
    if ((dev).is_cpu()) {           \
      kernels::cpu::call;           \
    } else {                        \
      no_cuda(#call);               \
    }                               \
  } while (0)
#endif

Tensor& Tensor::fill_(float value) {
  check_f32("fill_", *this);
  KOLO_FW_DISPATCH(device(), fill(numel(), value, fptr(*this)));
  return *this;
}
Tensor& Tensor::copy_(const Tensor& src) {
  if (!src.defined()) fail("copy_: source is an undefined tensor");
  if (src.numel() != numel())
    fail("copy_: shapes " + shape_to_string(src.shape()) + " and " + shape_to_string(shape()) +
         " have different sizes");
  Tensor s = src.dtype() == dtype() ? src : src.to(dtype());
  copy_bytes(raw_data(), device(), s.raw_data(), s.device(), nbytes());
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, float alpha) {
  check_operand("add_", *this, other);
  KOLO_FW_DISPATCH(device(), axpby(numel(), alpha, fptr(other), 1.f, fptr(*this)));
  return *this;
}
Tensor& Tensor::mul_(float value) {
  check_f32("mul_", *this);
  KOLO_FW_DISPATCH(device(), scale(numel(), value, fptr(*this)));
  return *this;
}
Tensor& Tensor::mul_(const Tensor& other) {
  check_operand("mul_", *this, other);
  KOLO_FW_DISPATCH(device(), mul(numel(), fptr(*this), fptr(other), fptr(*this)));
  return *this;
}
Tensor& Tensor::addcmul_(const Tensor& a, const Tensor& b, float value) {
  check_operand("addcmul_", *this, a);
  check_operand("addcmul_", *this, b);
  KOLO_FW_DISPATCH(device(), addcmul(numel(), fptr(*this), fptr(a), fptr(b), value));
  return *this;
}
Tensor& Tensor::addcdiv_sqrt_(const Tensor& a, const Tensor& b, float value, float eps) {
  check_operand("addcdiv_sqrt_", *this, a);
  check_operand("addcdiv_sqrt_", *this, b);
  KOLO_FW_DISPATCH(device(), addcdiv_sqrt(numel(), fptr(*this), fptr(a), fptr(b), value, eps));
  return *this;
}
Tensor& Tensor::lerp_(const Tensor& other, float alpha, float beta) {
  check_operand("lerp_", *this, other);
  KOLO_FW_DISPATCH(device(), axpby(numel(), beta, fptr(other), alpha, fptr(*this)));
  return *this;
}
float Tensor::sum() const {
  check_f32("sum", *this);
  if (device().is_cpu()) return kernels::cpu::sum(numel(), fptr(*this));
#ifdef KOLO_HAVE_CUDA
  kernels::cuda::set_device(device().index);
  return kernels::cuda::sum(numel(), fptr(*this));
#else
  no_cuda("sum");
#endif
}
float Tensor::sq_norm() const {
  check_f32("sq_norm", *this);
  if (device().is_cpu()) return kernels::cpu::sq_sum(numel(), fptr(*this));
#ifdef KOLO_HAVE_CUDA
  kernels::cuda::set_device(device().index);
  return kernels::cuda::sq_sum(numel(), fptr(*this));
#else
  no_cuda("sq_norm");
#endif
}

// ---------------------------------------------------------------- autograd accessors
bool Tensor::requires_grad() const {
  return checked(impl_).autograd != nullptr && impl_->autograd->requires_grad;
}
Tensor& Tensor::set_requires_grad(bool value) {
  checked(impl_);
  if (impl_->autograd && impl_->autograd->grad_fn)
    fail("set_requires_grad: only leaf tensors can be marked; this one is the output of " +
         std::string(impl_->autograd->grad_fn->name()));
  if (value && dtype() != DataType::kFloat32)
    fail("set_requires_grad: only float32 tensors can require grad, got " +
         std::string(dtype_name(dtype())));
  if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  impl_->autograd->requires_grad = value;
  return *this;
}
Tensor Tensor::grad() const {
  checked(impl_);
  return impl_->autograd ? impl_->autograd->grad : Tensor();
}
void Tensor::set_grad(const Tensor& grad) const {
  checked(impl_);
  if (grad.defined()) {
    check_same_shape("set_grad", *this, grad);
    check_same_device("set_grad", *this, grad);
  }
  if (!impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  grad.set_memory_category(MemoryCategory::kGradients);
  impl_->autograd->grad = grad;
}
void Tensor::set_memory_category(MemoryCategory category) const {
  if (impl_ && impl_->storage) impl_->storage->set_category(category);
}
void Tensor::zero_grad() const {
  Tensor g = grad();
  if (g.defined()) g.fill_(0.f);
}
int Tensor::register_grad_ready_hook(GradHook hook) const {
  if (!requires_grad() || impl_->autograd->grad_fn)
    fail("register_grad_ready_hook: tensor " + to_string() +
         " is not a leaf that requires grad (call set_requires_grad(true) first)");
  const int id = impl_->autograd->next_hook_id++;
  impl_->autograd->hooks.emplace_back(id, std::move(hook));
  return id;
}
void Tensor::remove_grad_ready_hook(int id) const {
  if (!defined() || !impl_->autograd) return;
  auto& hooks = impl_->autograd->hooks;
  std::erase_if(hooks, [id](const auto& h) { return h.first == id; });
}
void Tensor::backward(const Tensor& grad_output) const { fw::backward(*this, grad_output); }

}  // namespace kolo::fw
