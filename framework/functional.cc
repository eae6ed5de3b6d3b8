#include "framework/functional.h"

#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "framework/autograd.h"
#include "framework/kernels/dispatch.h"

namespace kolo::fw {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error(Status::InvalidArgument(msg)); }

float* F(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

// The backward of most ops is a closure over the (detached) tensors it needs. Saved tensors are
// always detached so that an output never keeps its own Node alive (no reference cycle).
class LambdaNode : public Node {
 public:
  using Fn = std::function<std::vector<Tensor>(const Tensor&)>;
  LambdaNode(const char* name, Fn fn) : name_(name), fn_(std::move(fn)) {}
  std::vector<Tensor> backward(const Tensor& g) override { return fn_(g); }
  const char* name() const override { return name_; }

 private:
  const char* name_;
  Fn fn_;
};

void attach(Tensor& out, const char* name, LambdaNode::Fn fn, const std::vector<Tensor>& inputs) {
  if (!needs_grad(inputs)) return;
  record(out, std::make_shared<LambdaNode>(name, std::move(fn)), inputs);
}

void check_input(const char* fn, const char* arg, const Tensor& t) {
  if (!t.defined()) fail(std::string(fn) + ": " + arg + " is an undefined tensor");
  if (t.dtype() != DataType::kFloat32)
    fail(std::string(fn) + ": " + arg + " must be float32, got " +
         std::string(dtype_name(t.dtype())));
}
void check_rank(const char* fn, const char* arg, const Tensor& t, int64_t rank) {
  check_input(fn, arg, t);
  if (t.dim() != rank)
    fail(std::string(fn) + ": " + arg + " must have " + std::to_string(rank) +
         " dimensions, got shape " + shape_to_string(t.shape()));
}
void check_pair(const char* fn, const Tensor& a, const Tensor& b) {
  check_input(fn, "a", a);
  check_input(fn, "b", b);
  check_same_shape(fn, a, b);
  check_same_device(fn, a, b);
}
Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.device()); }
bool wants(const Tensor& t) { return t.defined() && t.requires_grad(); }

}  // namespace

// ---------------------------------------------------------------- elementwise
Tensor add(const Tensor& a, const Tensor& b) {
  check_pair("add", a, b);
  Tensor out = empty_like(a);
  KOLO_FW_CALL(a.device(), add(a.numel(), F(a), 1.f, F(b), F(out)));
  attach(out, "Add", [](const Tensor& g) { return std::vector<Tensor>{g, g}; }, {a, b});
  return out;
}
Tensor sub(const Tensor& a, const Tensor& b) {
  check_pair("sub", a, b);
  Tensor out = empty_like(a);
  KOLO_FW_CALL(a.device(), add(a.numel(), F(a), -1.f, F(b), F(out)));
  attach(out, "Sub",
         [](const Tensor& g) {
           return std::vector<Tensor>{g, g.clone().mul_(-1.f)};
         },
         {a, b});
  return out;
}
Tensor mul(const Tensor& a, const Tensor& b) {
  check_pair("mul", a, b);
  Tensor out = empty_like(a);
  KOLO_FW_CALL(a.device(), mul(a.numel(), F(a), F(b), F(out)));
  const bool ga = wants(a), gb = wants(b);
  attach(out, "Mul",
         [ad = a.detach(), bd = b.detach(), ga, gb](const Tensor& g) {
           std::vector<Tensor> r(2);
           if (ga) r[0] = g.clone().mul_(bd);
           if (gb) r[1] = g.clone().mul_(ad);
           return r;
         },
         {a, b});
  return out;
}
Tensor scale(const Tensor& a, float s) {
  check_input("scale", "a", a);
  Tensor out = a.detach().clone().mul_(s);
  attach(out, "Scale", [s](const Tensor& g) { return std::vector<Tensor>{g.clone().mul_(s)}; },
         {a});
  return out;
}
Tensor relu(const Tensor& x) {
  check_input("relu", "x", x);
  Tensor out = empty_like(x);
  KOLO_FW_CALL(x.device(), relu_fwd(x.numel(), F(x), F(out)));
  attach(out, "Relu",
         [xd = x.detach()](const Tensor& g) {
           Tensor gx = empty_like(g);
           KOLO_FW_CALL(g.device(), relu_bwd(g.numel(), F(xd), F(g), F(gx)));
           return std::vector<Tensor>{gx};
         },
         {x});
  return out;
}
Tensor sigmoid(const Tensor& x) {
  check_input("sigmoid", "x", x);
  Tensor out = empty_like(x);
  KOLO_FW_CALL(x.device(), sigmoid_fwd(x.numel(), F(x), F(out)));
  attach(out, "Sigmoid",
         [yd = out.detach()](const Tensor& g) {
           Tensor gx = empty_like(g);
           KOLO_FW_CALL(g.device(), sigmoid_bwd(g.numel(), F(yd), F(g), F(gx)));
           return std::vector<Tensor>{gx};
         },
         {x});
  return out;
}
Tensor tanh(const Tensor& x) {
  check_input("tanh", "x", x);
  Tensor out = empty_like(x);
  KOLO_FW_CALL(x.device(), tanh_fwd(x.numel(), F(x), F(out)));
  attach(out, "Tanh",
         [yd = out.detach()](const Tensor& g) {
           Tensor gx = empty_like(g);
           KOLO_FW_CALL(g.device(), tanh_bwd(g.numel(), F(yd), F(g), F(gx)));
           return std::vector<Tensor>{gx};
         },
         {x});
  return out;
}

// ---------------------------------------------------------------- reductions
Tensor sum(const Tensor& x) {
  check_input("sum", "x", x);
  Tensor out = Tensor::full({}, x.sum(), x.device());
  attach(out, "Sum",
         [shape = x.shape()](const Tensor& g) {
           return std::vector<Tensor>{Tensor::full(shape, g.item(), g.device())};
         },
         {x});
  return out;
}
Tensor mean(const Tensor& x) {
  check_input("mean", "x", x);
  const int64_t n = x.numel();
  if (n == 0) fail("mean: x is empty (shape " + shape_to_string(x.shape()) + ")");
  Tensor out = Tensor::full({}, x.sum() / static_cast<float>(n), x.device());
  attach(out, "Mean",
         [shape = x.shape(), n](const Tensor& g) {
           return std::vector<Tensor>{
               Tensor::full(shape, g.item() / static_cast<float>(n), g.device())};
         },
         {x});
  return out;
}

// ---------------------------------------------------------------- matrix products
Tensor matmul(const Tensor& a, const Tensor& b) {
  check_rank("matmul", "a", a, 2);
  check_rank("matmul", "b", b, 2);
  check_same_device("matmul", a, b);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (b.size(0) != k)
    fail("matmul: inner dimensions differ: a is " + shape_to_string(a.shape()) + ", b is " +
         shape_to_string(b.shape()));
  Tensor out = Tensor::empty({m, n}, a.device());
  KOLO_FW_CALL(a.device(), gemm(false, false, m, n, k, 1.f, F(a), F(b), 0.f, F(out)));
  const bool ga = wants(a), gb = wants(b);
  attach(out, "MatMul",
         [ad = a.detach(), bd = b.detach(), m, n, k, ga, gb](const Tensor& g) {
           std::vector<Tensor> r(2);
           if (ga) {
             r[0] = Tensor::empty({m, k}, g.device());
             KOLO_FW_CALL(g.device(), gemm(false, true, m, k, n, 1.f, F(g), F(bd), 0.f, F(r[0])));
           }
           if (gb) {
             r[1] = Tensor::empty({k, n}, g.device());
             KOLO_FW_CALL(g.device(), gemm(true, false, k, n, m, 1.f, F(ad), F(g), 0.f, F(r[1])));
           }
           return r;
         },
         {a, b});
  return out;
}

namespace {
// What linear's backward needs: the inputs (detached), the sizes and which gradients to make.
struct LinearSaved {
  Tensor x, w;
  int64_t n, in, out;
  bool gx, gw, gb;
};

// Checks linear's arguments (InvalidArgument naming them) and says what its backward needs.
LinearSaved check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_rank("linear", "x", x, 2);
  check_rank("linear", "weight", weight, 2);
  check_same_device("linear", x, weight);
  const int64_t n = x.size(0), in = x.size(1), out_f = weight.size(0);
  if (weight.size(1) != in)
    fail("linear: x has " + std::to_string(in) + " features (shape " + shape_to_string(x.shape()) +
         ") but weight expects " + std::to_string(weight.size(1)) + " (shape " +
         shape_to_string(weight.shape()) + ")");
  if (bias.defined()) {
    check_rank("linear", "bias", bias, 1);
    check_same_device("linear", x, bias);
    if (bias.size(0) != out_f)
      fail("linear: bias shape " + shape_to_string(bias.shape()) + " does not match " +
           std::to_string(out_f) + " output features");
  }
  return {x.detach(), weight.detach(), n, in, out_f, wants(x), wants(weight), wants(bias)};
}

// The gradients of x, weight and bias from the output's gradient g [n, out].
std::vector<Tensor> linear_backward(const LinearSaved& s, const Tensor& g) {
  std::vector<Tensor> r(3);
  const Device d = g.device();
  if (s.gx) {
    r[0] = Tensor::empty({s.n, s.in}, d);
    KOLO_FW_CALL(d, gemm(false, false, s.n, s.in, s.out, 1.f, F(g), F(s.w), 0.f, F(r[0])));
  }
  if (s.gw) {
    r[1] = Tensor::empty({s.out, s.in}, d);
    KOLO_FW_CALL(d, gemm(true, false, s.out, s.in, s.n, 1.f, F(g), F(s.x), 0.f, F(r[1])));
  }
  if (s.gb) {
    r[2] = Tensor::empty({s.out}, d);
    KOLO_FW_CALL(d, col_sum(s.n, s.out, F(g), 0.f, F(r[2])));
  }
  return r;
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const LinearSaved s = check_linear(x, weight, bias);
  Tensor y = Tensor::empty({s.n, s.out}, x.device());
  KOLO_FW_CALL(x.device(), gemm(false, true, s.n, s.out, s.in, 1.f, F(x), F(weight), 0.f, F(y)));
  if (bias.defined()) KOLO_FW_CALL(x.device(), add_row_bias(s.n, s.out, F(bias), F(y)));
  attach(y, "Linear", [s](const Tensor& g) { return linear_backward(s, g); }, {x, weight, bias});
  return y;
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
#ifdef KOLO_HAVE_CUDA
  if (x.device().is_cuda() && bias.defined()) {
    const LinearSaved s = check_linear(x, weight, bias);
    Tensor y = Tensor::empty({s.n, s.out}, x.device());
    kernels::cuda::set_device(x.device().index);
    if (kernels::cuda::linear_bias_relu(s.n, s.in, s.out, F(x), F(weight), F(bias), F(y))) {
      // y > 0 exactly where x w^T + b > 0, so the ReLU's mask comes from the output.
      attach(y, "LinearRelu",
             [s, yd = y.detach()](const Tensor& g) {
               Tensor gz = empty_like(g);
               kernels::cuda::set_device(g.device().index);
               kernels::cuda::relu_bwd(g.numel(), F(yd), F(g), F(gz));
               return linear_backward(s, gz);
             },
             {x, weight, bias});
      return y;
    }
  }
#endif
  return relu(linear(x, weight, bias));
}

// ---------------------------------------------------------------- convolution
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
              int64_t pad) {
  check_rank("conv2d", "x", x, 4);
  check_rank("conv2d", "weight", weight, 4);
  check_same_device("conv2d", x, weight);
  if (stride < 1) fail("conv2d: stride must be >= 1, got " + std::to_string(stride));
  if (pad < 0) fail("conv2d: pad must be >= 0, got " + std::to_string(pad));
  const int64_t n = x.size(0), oc = weight.size(0);
  kernels::cpu::ConvGeom geo{x.size(1),      x.size(2), x.size(3), weight.size(2),
                             weight.size(3), stride,    pad};
  if (weight.size(1) != geo.c)
    fail("conv2d: x has " + std::to_string(geo.c) + " channels (shape " +
         shape_to_string(x.shape()) + ") but weight expects " + std::to_string(weight.size(1)) +
         " (shape " + shape_to_string(weight.shape()) + ")");
  if (geo.h + 2 * pad < geo.kh || geo.w + 2 * pad < geo.kw)
    fail("conv2d: kernel " + shape_to_string(weight.shape()) + " is larger than the padded input " +
         shape_to_string(x.shape()));
  if (bias.defined()) {
    check_rank("conv2d", "bias", bias, 1);
    if (bias.size(0) != oc)
      fail("conv2d: bias shape " + shape_to_string(bias.shape()) + " does not match " +
           std::to_string(oc) + " output channels");
  }
  const int64_t oh = geo.oh(), ow = geo.ow();
  const Device d = x.device();
  Tensor y = Tensor::empty({n, oc, oh, ow}, d);
  if (d.is_cpu()) {
    kernels::cpu::conv2d_fwd(n, geo, oc, F(x), F(weight), bias.defined() ? F(bias) : nullptr, F(y));
  } else {
#ifdef KOLO_HAVE_CUDA
    kernels::cuda::set_device(d.index);
    kernels::cuda::conv2d_fwd(n, geo, oc, F(x), F(weight), F(y));
    if (bias.defined()) kernels::cuda::add_channel_bias(n, oc, oh * ow, F(bias), F(y));
#else
    kernels::throw_no_cuda("conv2d");
#endif
  }
  const bool gx = wants(x), gw = wants(weight), gb = wants(bias);
  attach(y, "Conv2d",
         [xd = x.detach(), wd = weight.detach(), geo, n, oc, gx, gw, gb](const Tensor& g) {
           std::vector<Tensor> r(3);
           const Device d = g.device();
           if (d.is_cpu()) {
             // Every gradient is overwritten (see cpu_kernels.h), so no zero fill.
             if (gx) r[0] = Tensor::empty(xd.shape(), d);
             if (gw) r[1] = Tensor::empty(wd.shape(), d);
             if (gb) r[2] = Tensor::empty({oc}, d);
             kernels::cpu::conv2d_bwd(n, geo, oc, F(xd), F(wd), F(g), gx ? F(r[0]) : nullptr,
                                      gw ? F(r[1]) : nullptr, gb ? F(r[2]) : nullptr);
             return r;
           }
#ifdef KOLO_HAVE_CUDA
           // cuDNN overwrites (beta 0), so no zero fill; an unwanted gradient is not computed.
           if (gx) r[0] = Tensor::empty(xd.shape(), d);
           if (gw) r[1] = Tensor::empty(wd.shape(), d);
           kernels::cuda::set_device(d.index);
           kernels::cuda::conv2d_bwd(n, geo, oc, F(xd), F(wd), F(g), gx ? F(r[0]) : nullptr,
                                     gw ? F(r[1]) : nullptr);
           if (gb) {
             r[2] = Tensor::empty({oc}, d);
             kernels::cuda::channel_sum(n, oc, geo.oh() * geo.ow(), F(g), 0.f, F(r[2]));
           }
#endif
           return r;
         },
         {x, weight, bias});
  return y;
}

// ---------------------------------------------------------------- pooling
namespace {
kernels::cpu::PoolGeom pool_geom(const char* fn, const Tensor& x, int64_t kernel, int64_t stride) {
  check_rank(fn, "x", x, 4);
  if (kernel < 1) fail(std::string(fn) + ": kernel must be >= 1, got " + std::to_string(kernel));
  if (stride < 1) fail(std::string(fn) + ": stride must be >= 1, got " + std::to_string(stride));
  if (x.size(2) < kernel || x.size(3) < kernel)
    fail(std::string(fn) + ": kernel " + std::to_string(kernel) + " is larger than the input " +
         shape_to_string(x.shape()));
  return {x.size(0) * x.size(1), x.size(2), x.size(3), kernel, stride};
}
}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride) {
  const auto geo = pool_geom("max_pool2d", x, kernel, stride);
  const Device d = x.device();
  Tensor y = Tensor::empty({x.size(0), x.size(1), geo.oh(), geo.ow()}, d);
  Tensor argmax = Tensor::empty(y.shape(), d, DataType::kInt32);
  KOLO_FW_CALL(d, maxpool_fwd(geo, F(x), F(y), static_cast<int32_t*>(argmax.raw_data())));
  attach(y, "MaxPool2d",
         [geo, argmax, shape = x.shape()](const Tensor& g) {
           const auto* am = static_cast<const int32_t*>(argmax.raw_data());
           if (g.device().is_cpu()) {
             Tensor gx = Tensor::empty(shape, g.device());
             kernels::cpu::maxpool_bwd_overwrite(geo, F(g), am, F(gx));
             return std::vector<Tensor>{gx};
           }
           Tensor gx = Tensor::empty(shape, g.device());  // the gather writes every element
           KOLO_FW_CALL(g.device(), maxpool_bwd(geo, F(g), am, F(gx)));
           return std::vector<Tensor>{gx};
         },
         {x});
  return y;
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride) {
  const auto geo = pool_geom("avg_pool2d", x, kernel, stride);
  const Device d = x.device();
  Tensor y = Tensor::empty({x.size(0), x.size(1), geo.oh(), geo.ow()}, d);
  KOLO_FW_CALL(d, avgpool_fwd(geo, F(x), F(y)));
  attach(y, "AvgPool2d",
         [geo, shape = x.shape()](const Tensor& g) {
           Tensor gx = Tensor::zeros(shape, g.device());
           KOLO_FW_CALL(g.device(), avgpool_bwd(geo, F(g), F(gx)));
           return std::vector<Tensor>{gx};
         },
         {x});
  return y;
}

// ---------------------------------------------------------------- dropout
Tensor dropout(const Tensor& x, float p, bool training, Generator* gen) {
  check_input("dropout", "x", x);
  if (!(p >= 0.f && p < 1.f)) fail("dropout: p must be in [0, 1), got " + std::to_string(p));
  if (!training || p == 0.f) return x;
  Generator& rng = gen ? *gen : Generator::default_generator();
  // The mask is drawn on the host so CPU and CUDA runs with one seed drop the same elements.
  std::vector<float> mask(static_cast<size_t>(x.numel()));
  const float keep_scale = 1.f / (1.f - p);
  for (float& m : mask) m = rng.next_uniform() < p ? 0.f : keep_scale;
  Tensor mt = Tensor::from_vector(mask, x.shape(), x.device());
  Tensor out = x.detach().clone().mul_(mt);
  attach(out, "Dropout", [mt](const Tensor& g) { return std::vector<Tensor>{g.clone().mul_(mt)}; },
         {x});
  return out;
}

// ---------------------------------------------------------------- batch norm
namespace {
struct BnDims {
  int64_t n, c, hw;
};
BnDims bn_dims(const char* fn, const Tensor& x, const Tensor& gamma, const Tensor& beta) {
  check_input(fn, "x", x);
  check_input(fn, "gamma", gamma);
  check_input(fn, "beta", beta);
  if (x.dim() != 2 && x.dim() != 4)
    fail(std::string(fn) + ": x must be [N, C] or [N, C, H, W], got " + shape_to_string(x.shape()));
  const int64_t c = x.size(1);
  if (gamma.shape() != Shape{c} || beta.shape() != Shape{c})
    fail(std::string(fn) + ": gamma " + shape_to_string(gamma.shape()) + " and beta " +
         shape_to_string(beta.shape()) + " must be [" + std::to_string(c) + "] for x " +
         shape_to_string(x.shape()));
  return {x.size(0), c, x.dim() == 4 ? x.size(2) * x.size(3) : 1};
}
}  // namespace

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        BatchStatsReducer* reducer, BatchNormStats* stats_out) {
  const BnDims dm = bn_dims("batch_norm", x, gamma, beta);
  const Device d = x.device();
  Tensor s = Tensor::empty({dm.c}, d), s2 = Tensor::empty({dm.c}, d);
  KOLO_FW_CALL(d, channel_sums(dm.n, dm.c, dm.hw, F(x), F(s), F(s2)));
  int64_t count = dm.n * dm.hw;
  if (reducer) reducer->reduce_forward(s, s2, count);
  if (count < 1) fail("batch_norm: batch statistics need at least one value per channel");
  Tensor mu = Tensor::empty({dm.c}, d), var = Tensor::empty({dm.c}, d);
  Tensor invstd = Tensor::empty({dm.c}, d);
  KOLO_FW_CALL(
      d, bn_finalize(dm.c, static_cast<float>(count), eps, F(s), F(s2), F(mu), F(var), F(invstd)));
  Tensor y = empty_like(x), xhat = empty_like(x);
  KOLO_FW_CALL(d, batchnorm_apply(dm.n, dm.c, dm.hw, F(x), F(mu), F(invstd), F(gamma), F(beta),
                                  F(y), F(xhat)));
  if (stats_out) *stats_out = {mu, var, count};
  const bool gg = wants(gamma), gbeta = wants(beta), gx = wants(x);
  // reducer must outlive the graph (the owning module does; see nn/batchnorm.h).
  attach(y, "BatchNorm",
         [dm, xhat, invstd, gd = gamma.detach(), reducer, count, gg, gbeta, gx](const Tensor& g) {
           const Device d = g.device();
           Tensor sg = Tensor::empty({dm.c}, d), sgx = Tensor::empty({dm.c}, d);
           KOLO_FW_CALL(d, channel_dot_sums(dm.n, dm.c, dm.hw, F(g), F(xhat), F(sg), F(sgx)));
           std::vector<Tensor> r(3);
           if (gg) r[1] = sgx.clone();  // local: the optimizer averages parameter gradients
           if (gbeta) r[2] = sg.clone();
           if (gx) {
             if (reducer) reducer->reduce_backward(sg, sgx);
             r[0] = empty_like(g);
             KOLO_FW_CALL(
                 d, batchnorm_bwd_input(dm.n, dm.c, dm.hw, F(g), F(xhat), F(invstd), F(gd), F(sg),
                                        F(sgx), static_cast<float>(count), F(r[0])));
           }
           return r;
         },
         {x, gamma, beta});
  return y;
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& mean_t, const Tensor& var_t, float eps) {
  const BnDims dm = bn_dims("batch_norm_eval", x, gamma, beta);
  const Device d = x.device();
  std::vector<float> v = var_t.to_vector();
  if (static_cast<int64_t>(v.size()) != dm.c || mean_t.numel() != dm.c)
    fail("batch_norm_eval: running mean/var must have " + std::to_string(dm.c) + " elements");
  for (float& e : v) e = 1.f / std::sqrt(e + eps);
  Tensor invstd = Tensor::from_vector(v, {dm.c}, d);
  Tensor y = empty_like(x);
  KOLO_FW_CALL(d, batchnorm_apply(dm.n, dm.c, dm.hw, F(x), F(mean_t), F(invstd), F(gamma), F(beta),
                                  F(y), nullptr));
  const bool gx = wants(x), gg = wants(gamma), gbeta = wants(beta);
  attach(y, "BatchNormEval",
         [dm, xd = x.detach(), md = mean_t.detach(), invstd, gd = gamma.detach(), gx, gg,
          gbeta](const Tensor& g) {
           const Device d = g.device();
           std::vector<Tensor> r(3);
           Tensor zero = Tensor::zeros({dm.c}, d);
           if (gx) {  // gx = gy * gamma * invstd: batchnorm_apply with mean 0, beta 0.
             r[0] = empty_like(g);
             KOLO_FW_CALL(d, batchnorm_apply(dm.n, dm.c, dm.hw, F(g), F(zero), F(invstd), F(gd),
                                             F(zero), F(r[0]), nullptr));
           }
           if (gg || gbeta) {
             Tensor xhat = empty_like(xd), ones = Tensor::ones({dm.c}, d);
             KOLO_FW_CALL(d, batchnorm_apply(dm.n, dm.c, dm.hw, F(xd), F(md), F(invstd), F(ones),
                                             F(zero), F(xhat), nullptr));
             Tensor sg = Tensor::empty({dm.c}, d), sgx = Tensor::empty({dm.c}, d);
             KOLO_FW_CALL(d, channel_dot_sums(dm.n, dm.c, dm.hw, F(g), F(xhat), F(sg), F(sgx)));
             if (gg) r[1] = sgx;
             if (gbeta) r[2] = sg;
           }
           return r;
         },
         {x, gamma, beta});
  return y;
}

// ---------------------------------------------------------------- softmax and losses
Tensor log_softmax(const Tensor& x) {
  check_rank("log_softmax", "x", x, 2);
  const int64_t m = x.size(0), n = x.size(1);
  Tensor y = empty_like(x);
  KOLO_FW_CALL(x.device(), log_softmax(m, n, F(x), F(y)));
  attach(y, "LogSoftmax",
         [yd = y.detach(), m, n](const Tensor& g) {
           Tensor gx = empty_like(g);
           KOLO_FW_CALL(g.device(), log_softmax_bwd(m, n, F(yd), F(g), F(gx)));
           return std::vector<Tensor>{gx};
         },
         {x});
  return y;
}

namespace {
// Both losses' argument checks: logits [M, N], int64 labels [M] on the logits' device.
void check_cross_entropy_args(const Tensor& logits, const Tensor& labels) {
  check_rank("cross_entropy", "logits", logits, 2);
  const int64_t m = logits.size(0);
  if (!labels.defined() || labels.dtype() != DataType::kInt64 || labels.shape() != Shape{m})
    fail("cross_entropy: labels must be int64 of shape [" + std::to_string(m) + "], got " +
         labels.to_string());
  check_same_device("cross_entropy", logits, labels);
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  check_cross_entropy_args(logits, labels);
  const int64_t m = logits.size(0), n = logits.size(1);
  // Range check on the host: an out-of-range label would read outside the row.
  check_labels(labels, n);
  const Device d = logits.device();
  Tensor logp = empty_like(logits);
  KOLO_FW_CALL(d, log_softmax(m, n, F(logits), F(logp)));
  const float loss =
      KOLO_FW_CALL(d, nll_mean(m, n, F(logp), static_cast<const int64_t*>(labels.raw_data())));
  Tensor out = Tensor::full({}, loss, d);
  attach(out, "CrossEntropy",
         [logp, labels, m, n](const Tensor& g) {
           Tensor gx = empty_like(logp);
           KOLO_FW_CALL(g.device(), softmax_xent_bwd(m, n, F(logp),
                                                     static_cast<const int64_t*>(labels.raw_data()),
                                                     g.item(), F(gx)));
           return std::vector<Tensor>{gx, Tensor()};
         },
         {logits});
  return out;
}

void check_labels(const Tensor& labels, int64_t classes) {
  const Tensor hl = labels.to(Device::cpu());
  const int64_t* p = hl.data<int64_t>();
  for (int64_t i = 0; i < hl.numel(); ++i)
    if (p[i] < 0 || p[i] >= classes)
      fail("cross_entropy: label " + std::to_string(p[i]) + " at index " + std::to_string(i) +
           " is outside [0, " + std::to_string(classes) + ")");
}

Tensor cross_entropy_capturable(const Tensor& logits, const Tensor& labels) {
  if (logits.device().is_cpu()) return cross_entropy(logits, labels);
#ifndef KOLO_HAVE_CUDA
  kernels::throw_no_cuda("cross_entropy_capturable");
#else
  check_cross_entropy_args(logits, labels);
  const int64_t m = logits.size(0), n = logits.size(1);
  const Device d = logits.device();
  const auto* lp = static_cast<const int64_t*>(labels.raw_data());
  Tensor logp = empty_like(logits);
  Tensor out = Tensor::empty({}, d);
  kernels::cuda::set_device(d.index);
  kernels::cuda::log_softmax(m, n, F(logits), F(logp));
  kernels::cuda::nll_mean_to(m, n, F(logp), lp, F(out));
  attach(out, "CrossEntropy",
         [logp, labels, m, n](const Tensor& g) {
           Tensor gx = empty_like(logp);
           kernels::cuda::set_device(g.device().index);
           kernels::cuda::softmax_xent_bwd_dev(
               m, n, F(logp), static_cast<const int64_t*>(labels.raw_data()), F(g), F(gx));
           return std::vector<Tensor>{gx, Tensor()};
         },
         {logits});
  return out;
#endif
}

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  check_pair("mse_loss", pred, target);
  const int64_t n = pred.numel();
  if (n == 0) fail("mse_loss: inputs are empty");
  Tensor diff = empty_like(pred);
  KOLO_FW_CALL(pred.device(), add(n, F(pred), -1.f, F(target), F(diff)));
  Tensor out = Tensor::full({}, diff.sq_norm() / static_cast<float>(n), pred.device());
  const bool gp = wants(pred), gt = wants(target);
  attach(out, "MseLoss",
         [diff, n, gp, gt](const Tensor& g) {
           Tensor gd = diff.clone().mul_(2.f * g.item() / static_cast<float>(n));
           std::vector<Tensor> r(2);
           if (gt) r[1] = gd.clone().mul_(-1.f);
           if (gp) r[0] = gd;
           return r;
         },
         {pred, target});
  return out;
}

}  // namespace kolo::fw
