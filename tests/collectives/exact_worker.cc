// exact_worker: one rank of the KOLO_REDUCTION=exact test (exact_test.cc), through the public
// API, so fusion, piggy-back, the backend and the executor's exact path all take part.
//
//   exact_worker --seed S --out DIR [--rotate K] [--chunks 1]
//
// Every rank builds the same lists of values from S: for element i of each tensor, size()
// values (hand-made ones first: cancellations such as 1e8, 1, -1e8, 1; overflow; subnormals;
// ties; NaN, +-Inf, Inf - Inf, -0; then random bits over the whole exponent range); rank r
// contributes value (r + K) % size(), so runs with different K give every element the same
// multiset from other ranks. The tensors: a sum and an average of each float dtype, a float32
// sum small enough to ride the negotiation (piggy-back), with --chunks 1 a float32 sum past one
// chunk of accumulators (slow to check), and a float32 reducescatter. Each rank writes
// DIR/rank<R>.txt: per tensor a line "T name dtype op count offset", "I" and the hex bits of its
// inputs, "O" and those of its results (offset: where its result block starts, for the
// reducescatter). exact_check.py compares them with the correctly rounded sums. Exit 1 on an error.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kolo/float16.h"
#include "kolo/kolo.h"

namespace {

using kolo::DataType;
using kolo::ReduceOp;

struct Tensor {
  std::string name;
  DataType dtype;
  ReduceOp op;
  int64_t count;
  bool reducescatter = false;
  std::vector<uint64_t> in;  // this rank's values' bits
  std::vector<unsigned char> bytes;
};

int sig_bits(DataType d) {
  return d == DataType::kFloat16    ? 11
         : d == DataType::kBFloat16 ? 8
         : d == DataType::kFloat32  ? 24
                                    : 53;
}
int exp_bits(DataType d) { return d == DataType::kFloat16 ? 5 : d == DataType::kFloat64 ? 11 : 8; }
int width(DataType d) { return static_cast<int>(kolo::dtype_size(d)) * 8; }

// The bits of a double, rounded to d (only values that round exactly are made here).
uint64_t bits_of(DataType d, double x) {
  switch (d) {
    case DataType::kFloat16:
      return kolo::float_to_half(static_cast<float>(x));
    case DataType::kBFloat16:
      return kolo::float_to_bfloat16(static_cast<float>(x));
    case DataType::kFloat32:
      return kolo::float_to_bits(static_cast<float>(x));
    default: {
      uint64_t b;
      std::memcpy(&b, &x, 8);
      return b;
    }
  }
}

// Hand-made lists (cycled to the rank count), then random bits.
std::vector<uint64_t> values_of(DataType d, int64_t i, int p, std::mt19937_64& rng) {
  const int sig = sig_bits(d), eb = exp_bits(d), w = width(d);
  const uint64_t sign = uint64_t{1} << (w - 1), exp_ones = (uint64_t{1} << eb) - 1;
  const uint64_t inf = exp_ones << (sig - 1), max = inf - 1, tiny = 1;
  const uint64_t nan = inf | (uint64_t{1} << (sig - 2)) | 5;
  const double big = std::ldexp(1.0, sig + 2), half_ulp = std::ldexp(1.0, -sig);
  const uint64_t one = bits_of(d, 1.0), one_up = one + 1;
  const std::vector<std::vector<uint64_t>> crafted = {
      {bits_of(d, big), one, bits_of(d, -big), one},
      {max, max, max | sign, max | sign},
      {tiny, tiny, tiny | sign, tiny},
      {one, bits_of(d, half_ulp), 0, 0},
      {one_up, bits_of(d, half_ulp), 0, 0},
      {inf, inf | sign, one, one},
      {nan, one, one, one},
      {sign, sign, sign, sign},
      {inf, one, max, one},
      {sign, 0, sign, 0},
      {one, one | sign, tiny, tiny | sign},
      {max, bits_of(d, std::ldexp(1.0, (1 << (eb - 1)) - sig - 1)), 0, 0}};
  std::vector<uint64_t> out;
  if (i < static_cast<int64_t>(crafted.size())) {
    for (int r = 0; r < p; ++r) out.push_back(crafted[i][r % 4]);
    return out;
  }
  const bool narrow = rng() % 2;  // a few exponents apart: cancellations and ties
  const uint64_t e0 = rng() % exp_ones;
  for (int r = 0; r < p; ++r) {
    uint64_t e = narrow ? std::min(exp_ones - 1, e0 + rng() % 3) : rng() % exp_ones;
    if (rng() % 8 == 0) e = 0;  // subnormal
    uint64_t b = (e << (sig - 1)) | (rng() & ((uint64_t{1} << (sig - 1)) - 1));
    if (rng() % 2) b |= sign;
    if (r > 0 && rng() % 3 == 0) b = out[rng() % out.size()] ^ sign;  // cancel one
    if (rng() % 500 == 0) b = rng() % 2 ? nan : inf | (rng() % 2 ? sign : 0);
    out.push_back(b);
  }
  return out;
}

Tensor make(uint64_t seed, int index, std::string name, DataType d, ReduceOp op, int64_t count,
            int p, int me) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = d;
  t.op = op;
  t.count = count;
  std::mt19937_64 rng(seed * 1000003 + index);
  const size_t es = kolo::dtype_size(d);
  t.bytes.resize(static_cast<size_t>(count) * es);
  for (int64_t i = 0; i < count; ++i) {
    const std::vector<uint64_t> v = values_of(d, i, p, rng);
    t.in.push_back(v[me]);
    std::memcpy(t.bytes.data() + i * es, &t.in.back(), es);  // little-endian: the low bytes
  }
  return t;
}

void write_hex(std::ofstream& f, const char* tag, const unsigned char* data, int64_t n, size_t es) {
  f << tag;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t b = 0;
    std::memcpy(&b, data + i * es, es);
    char buf[24];
    std::snprintf(buf, sizeof buf, " %llx", static_cast<unsigned long long>(b));
    f << buf;
  }
  f << "\n";
}

int fail(const std::string& what, const kolo::Status& st) {
  std::fprintf(stderr, "rank %d: %s: %s\n", kolo::rank(), what.c_str(), st.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int rotate = 0;
  bool chunks = false;
  std::string dir = ".";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seed") seed = std::stoull(argv[i + 1]);
    if (a == "--rotate") rotate = std::stoi(argv[i + 1]);
    if (a == "--out") dir = argv[i + 1];
    if (a == "--chunks") chunks = std::stoi(argv[i + 1]) != 0;
  }
  if (kolo::Status st = kolo::init(); !st.ok()) return fail("init", st);
  const int p = kolo::size(), me = kolo::rank(), mine = (me + rotate) % p;
  std::vector<Tensor> ts;
  const DataType kFloats[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                              DataType::kBFloat16};
  int index = 0;
  for (DataType d : kFloats) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      ts.push_back(
          make(seed, index++,
               std::string(kolo::dtype_name(d)) + "." + std::string(kolo::reduce_op_name(op)), d,
               op, 400, p, mine));
    }
  }
  ts.push_back(make(seed, index++, "piggyback", DataType::kFloat32, ReduceOp::kSum, 16, p, mine));
  if (chunks)
    ts.push_back(make(seed, index, "chunks", DataType::kFloat32, ReduceOp::kSum, 310000, p, mine));
  ++index;
  Tensor rs =
      make(seed, index++, "reducescatter", DataType::kFloat32, ReduceOp::kAverage, 12 * p, p, mine);
  rs.reducescatter = true;
  ts.push_back(rs);

  std::vector<kolo::Handle> handles;
  for (Tensor& t : ts) {
    auto view = kolo::TensorView{t.bytes.data(), {t.count}, t.dtype};
    if (t.reducescatter)
      handles.push_back(kolo::reducescatter_async(t.name, view, {.reduction = {.op = t.op}}));
    else
      handles.push_back(kolo::allreduce_async(t.name, view, {.reduction = {.op = t.op}}));
  }
  std::ofstream f(dir + "/rank" + std::to_string(me) + ".txt");
  for (size_t k = 0; k < ts.size(); ++k) {
    Tensor& t = ts[k];
    if (kolo::Status st = handles[k].wait(); !st.ok()) return fail(t.name, st);
    const size_t es = kolo::dtype_size(t.dtype);
    const unsigned char* out = t.bytes.data();
    int64_t n = t.count, offset = 0;
    if (t.reducescatter) {
      out = static_cast<const unsigned char*>(handles[k].output_data());
      n = 12;
      offset = 12 * me;
    }
    f << "T " << t.name << " " << kolo::dtype_name(t.dtype) << " " << kolo::reduce_op_name(t.op)
      << " " << t.count << " " << offset << "\n";
    std::vector<unsigned char> in(t.in.size() * es);
    for (size_t i = 0; i < t.in.size(); ++i) std::memcpy(in.data() + i * es, &t.in[i], es);
    write_hex(f, "I", in.data(), t.count, es);
    write_hex(f, "O", out, n, es);
  }
  f.close();
  std::printf("rank %d: exact worker done\n", me);
  return kolo::shutdown().ok() ? 0 : 1;
}
