// deterministic_worker: one rank of the KOLO_DETERMINISTIC tests (deterministic_test.cc),
// through the public API, so that fusion, the cycle and the backend all take part.
//
//   deterministic_worker --seed S [--tensors N] [--no-check] [--delays]
//
// Every rank builds the same list of N tensors from S (dtype, reduction, length; every op and
// dtype, lengths from 1 element to about 1 MiB) and fills them with its own values, a function
// of (S, tensor, rank) only, so every rank can rebuild every other rank's input. It submits them
// in an order of its own (shuffled by rank), with --delays a random sleep of up to 2 ms before
// each, waits, and then, unless --no-check, compares every result bit for bit with the
// reference computed here: each element folded over the ranks in rank order, with the
// arithmetic documented in ops/reduce.h (prescale, combine, divide for average, postscale),
// written out again here. It prints "rank R checksum H" (FNV-1a of every result's bytes, in
// tensor order) and "rank R: deterministic checks passed". Exit 1 on a mismatch or an error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kolo/float16.h"
#include "kolo/kolo.h"

namespace {

using kolo::DataType;
using kolo::ReduceOp;
using kolo::Reduction;

struct Spec {
  DataType dtype;
  Reduction reduction;
  int64_t count;
};

// int16 is not drawn: the specs (and so the checksums the tests compare between runs) stay
// those of the eight original dtypes; collective_checks covers int16 on every backend.
constexpr DataType kDtypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                                DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                                DataType::kFloat32, DataType::kFloat64};

bool is_half(DataType d) { return d == DataType::kFloat16 || d == DataType::kBFloat16; }
bool is_float(DataType d) {
  return is_half(d) || d == DataType::kFloat32 || d == DataType::kFloat64;
}

// Tensor i: every dtype takes every op in turn; lengths cycle through small (one-round, recursive
// doubling or piggy-back), medium and large (the ring or the chunked path, several segments).
std::vector<Spec> make_specs(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                               ReduceOp::kProduct};
  std::vector<Spec> out;
  for (int i = 0; i < n; ++i) {
    Spec s;
    s.dtype = kDtypes[(i + rng() % 2) % 8];
    s.reduction.op = kOps[(i / 2 + rng() % 2) % 5];
    // Half are plain float32 sums, as gradients are: those fuse with each other.
    const bool gradient = i % 2 == 0;
    if (gradient) {
      s.dtype = DataType::kFloat32;
      s.reduction.op = ReduceOp::kSum;
    }
    if (s.reduction.op == ReduceOp::kSum || s.reduction.op == ReduceOp::kAverage) {
      // Scales that round in floats (0.1) and that do not (0.5, 3) alike.
      constexpr double kScales[] = {1.0, 0.5, 0.1, 3.0};
      s.reduction.prescale = kScales[rng() % 4];
      s.reduction.postscale = kScales[rng() % 4];
      // Integer scaling truncates: keep the integers' results readable, not overflowing.
      if (!is_float(s.dtype) || gradient) s.reduction.prescale = s.reduction.postscale = 1.0;
    }
    const int64_t es = static_cast<int64_t>(kolo::dtype_size(s.dtype));
    switch (rng() % 3) {
      case 0:
        s.count = 1 + static_cast<int64_t>(rng() % 64);
        break;
      case 1:
        s.count = 1 + static_cast<int64_t>(rng() % (64 * 1024 / es));
        break;
      default:
        s.count = 64 * 1024 / es + static_cast<int64_t>(rng() % (1024 * 1024 / es));
    }
    out.push_back(s);
  }
  return out;
}

uint64_t mix(uint64_t seed, int tensor, int rank) {
  return seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(tensor) * 1000003ull +
         static_cast<uint64_t>(rank) * 7919ull;
}

// Rank `rank`'s input for tensor `t`: floats of mixed magnitudes (so that the order of addition
// shows in the rounding), near 1 for products; small integers.
std::vector<unsigned char> make_input(const Spec& s, uint64_t seed, int t, int rank) {
  std::mt19937_64 rng(mix(seed, t, rank));
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  const bool product = s.reduction.op == ReduceOp::kProduct;
  std::vector<unsigned char> out(static_cast<size_t>(s.count) * kolo::dtype_size(s.dtype));
  for (int64_t i = 0; i < s.count; ++i) {
    const double f = product ? 1.0 + 0.25 * unit(rng)
                             : unit(rng) * std::ldexp(1.0, static_cast<int>(rng() % 17) - 8);
    const int64_t k =
        product ? static_cast<int64_t>(rng() % 5) - 2 : static_cast<int64_t>(rng() % 201) - 100;
    auto put = [&](auto v) { std::memcpy(out.data() + i * sizeof v, &v, sizeof v); };
    switch (s.dtype) {
      case DataType::kUInt8:
        put(static_cast<uint8_t>(k + 100));
        break;
      case DataType::kInt8:
        put(static_cast<int8_t>(k));
        break;
      case DataType::kInt16:
        put(static_cast<int16_t>(k));
        break;
      case DataType::kInt32:
        put(static_cast<int32_t>(k));
        break;
      case DataType::kInt64:
        put(k);
        break;
      case DataType::kFloat16:
        put(kolo::float_to_half(static_cast<float>(f)));
        break;
      case DataType::kBFloat16:
        put(kolo::float_to_bfloat16(static_cast<float>(f)));
        break;
      case DataType::kFloat32:
        put(static_cast<float>(f));
        break;
      case DataType::kFloat64:
        put(f);
        break;
    }
  }
  return out;
}

// The arithmetic of ops/reduce.h for one element type T (not the 16-bit floats).
template <typename T>
struct Native {
  // As ops/reduce.cc: narrower than int computes in unsigned int (no promotion to signed int).
  using Wide =
      std::conditional_t<(std::is_integral_v<T> && sizeof(T) < sizeof(unsigned)), unsigned,
                         typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                                     std::type_identity<T>>::type>;
  static T combine(ReduceOp op, T a, T b) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        return static_cast<T>(static_cast<Wide>(a) + static_cast<Wide>(b));
      case ReduceOp::kProduct:
        return static_cast<T>(static_cast<Wide>(a) * static_cast<Wide>(b));
      case ReduceOp::kMin:
        return b < a ? b : a;
      case ReduceOp::kMax:
        return a < b ? b : a;
    }
    return a;
  }
  // x * mul / div, as ops' scale (div 1) and divide (mul 1) compute it.
  static T map(T x, double mul, double div) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<double>(x) * mul / div);
    else
      return x * static_cast<T>(mul) / static_cast<T>(div);
  }
};

// float16 / bfloat16: widened to float, combined or scaled, rounded back once per step.
template <DataType D>
struct Half {
  using T = uint16_t;
  static float wide(T h) {
    return D == DataType::kFloat16 ? kolo::half_to_float(h) : kolo::bfloat16_to_float(h);
  }
  static T narrow(float f) {
    return D == DataType::kFloat16 ? kolo::float_to_half(f) : kolo::float_to_bfloat16(f);
  }
  static T combine(ReduceOp op, T a, T b) {
    return narrow(Native<float>::combine(op, wide(a), wide(b)));
  }
  static T map(T x, double mul, double div) {
    return narrow(wide(x) * static_cast<float>(mul) / static_cast<float>(div));
  }
};

// The reference: for every element, pre(x0) op pre(x1) op ... in rank order, then finish.
template <typename A, typename T>
std::vector<unsigned char> fold_typed(const Spec& s,
                                      const std::vector<std::vector<unsigned char>>& in) {
  const Reduction& r = s.reduction;
  const int p = static_cast<int>(in.size());
  std::vector<unsigned char> out(in[0].size());
  for (int64_t i = 0; i < s.count; ++i) {
    auto pre = [&](int q) {
      T x;
      std::memcpy(&x, in[q].data() + i * sizeof(T), sizeof(T));
      return r.prescale == 1.0 ? x : A::map(x, r.prescale, 1.0);
    };
    T acc = pre(0);
    for (int q = 1; q < p; ++q) acc = A::combine(r.op, acc, pre(q));
    if (r.op == ReduceOp::kAverage && p != 1) acc = A::map(acc, 1.0, p);
    if (r.postscale != 1.0) acc = A::map(acc, r.postscale, 1.0);
    std::memcpy(out.data() + i * sizeof(T), &acc, sizeof(T));
  }
  return out;
}

std::vector<unsigned char> reference(const Spec& s,
                                     const std::vector<std::vector<unsigned char>>& in) {
  switch (s.dtype) {
    case DataType::kUInt8:
      return fold_typed<Native<uint8_t>, uint8_t>(s, in);
    case DataType::kInt8:
      return fold_typed<Native<int8_t>, int8_t>(s, in);
    case DataType::kInt16:
      return fold_typed<Native<int16_t>, int16_t>(s, in);
    case DataType::kInt32:
      return fold_typed<Native<int32_t>, int32_t>(s, in);
    case DataType::kInt64:
      return fold_typed<Native<int64_t>, int64_t>(s, in);
    case DataType::kFloat16:
      return fold_typed<Half<DataType::kFloat16>, uint16_t>(s, in);
    case DataType::kBFloat16:
      return fold_typed<Half<DataType::kBFloat16>, uint16_t>(s, in);
    case DataType::kFloat32:
      return fold_typed<Native<float>, float>(s, in);
    case DataType::kFloat64:
      return fold_typed<Native<double>, double>(s, in);
  }
  return {};
}

uint64_t fnv1a(uint64_t h, const std::vector<unsigned char>& bytes) {
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}

std::string describe(const Spec& s) {
  return std::string(kolo::dtype_name(s.dtype)) + " " +
         std::string(kolo::reduce_op_name(s.reduction.op)) + " of " + std::to_string(s.count) +
         " (prescale " + std::to_string(s.reduction.prescale) + ", postscale " +
         std::to_string(s.reduction.postscale) + ")";
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int tensors = 24;
  bool check = true, delays = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc)
      seed = std::stoull(argv[++i]);
    else if (a == "--tensors" && i + 1 < argc)
      tensors = std::stoi(argv[++i]);
    else if (a == "--no-check")
      check = false;
    else if (a == "--delays")
      delays = true;
    else {
      std::fprintf(stderr, "deterministic_worker: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  kolo::Status st = kolo::init();
  if (!st.ok()) {
    std::fprintf(stderr, "deterministic_worker: init: %s\n", st.to_string().c_str());
    return 1;
  }
  const int rank = kolo::rank(), size = kolo::size();
  const std::vector<Spec> specs = make_specs(seed, tensors);
  std::vector<std::vector<unsigned char>> data;
  for (int t = 0; t < tensors; ++t) data.push_back(make_input(specs[t], seed, t, rank));

  std::vector<int> order(static_cast<size_t>(tensors));
  for (int t = 0; t < tensors; ++t) order[t] = t;
  std::mt19937_64 rng(mix(seed, -1, rank));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<kolo::Handle> handles(static_cast<size_t>(tensors));
  for (int t : order) {
    if (delays) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    kolo::TensorView v;
    v.data = data[t].data();
    v.shape = {specs[t].count};
    v.dtype = specs[t].dtype;
    handles[t] =
        kolo::allreduce_async("t" + std::to_string(t), v, {.reduction = specs[t].reduction});
  }
  int failures = 0;
  uint64_t checksum = 1469598103934665603ull;
  for (int t = 0; t < tensors; ++t) {
    st = handles[t].wait();
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d: tensor %d (%s): %s\n", rank, t, describe(specs[t]).c_str(),
                   st.to_string().c_str());
      ++failures;
      continue;
    }
    checksum = fnv1a(checksum, data[t]);
    if (!check) continue;
    std::vector<std::vector<unsigned char>> inputs;
    for (int q = 0; q < size; ++q) inputs.push_back(make_input(specs[t], seed, t, q));
    const std::vector<unsigned char> want = reference(specs[t], inputs);
    if (want != data[t]) {
      const size_t es = kolo::dtype_size(specs[t].dtype);
      size_t i = 0;
      while (std::memcmp(want.data() + i * es, data[t].data() + i * es, es) == 0) ++i;
      std::fprintf(stderr,
                   "rank %d: tensor %d (%s): element %zu differs from the rank-order "
                   "reference\n",
                   rank, t, describe(specs[t]).c_str(), i);
      ++failures;
    }
  }
  std::printf("rank %d checksum %016llx\n", rank, static_cast<unsigned long long>(checksum));
  (void)kolo::shutdown();
  if (failures > 0) return 1;
  std::printf("rank %d: deterministic checks passed\n", rank);
  return 0;
}
