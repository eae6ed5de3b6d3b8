#include "tests/collectives/collective_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "kolo/float16.h"

namespace kolo::testing {

namespace {

constexpr DataType kDtypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                                DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                                DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};
constexpr int64_t kCounts[] = {0, 1, 7, 1031};

bool is_unsigned(DataType d) { return d == DataType::kUInt8; }

// Typed buffers through double: every value used here is a small integer (or a half of
// one), which every dtype holds exactly.
std::vector<char> encode(DataType dtype, const std::vector<double>& values) {
  std::vector<char> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    char* p = out.data() + i * dtype_size(dtype);
    auto put = [p](auto x) { std::memcpy(p, &x, sizeof x); };
    switch (dtype) {
      case DataType::kUInt8:
        put(static_cast<uint8_t>(v));
        break;
      case DataType::kInt8:
        put(static_cast<int8_t>(v));
        break;
      case DataType::kInt16:
        put(static_cast<int16_t>(v));
        break;
      case DataType::kInt32:
        put(static_cast<int32_t>(v));
        break;
      case DataType::kInt64:
        put(static_cast<int64_t>(v));
        break;
      case DataType::kFloat16:
        put(float_to_half(static_cast<float>(v)));
        break;
      case DataType::kBFloat16:
        put(float_to_bfloat16(static_cast<float>(v)));
        break;
      case DataType::kFloat32:
        put(static_cast<float>(v));
        break;
      case DataType::kFloat64:
        put(v);
        break;
    }
  }
  return out;
}

double decode_one(DataType dtype, const char* p) {
  auto get = [p](auto x) {
    std::memcpy(&x, p, sizeof x);
    return x;
  };
  switch (dtype) {
    case DataType::kUInt8:
      return get(uint8_t{});
    case DataType::kInt8:
      return get(int8_t{});
    case DataType::kInt16:
      return get(int16_t{});
    case DataType::kInt32:
      return get(int32_t{});
    case DataType::kInt64:
      return static_cast<double>(get(int64_t{}));
    case DataType::kFloat16:
      return half_to_float(get(uint16_t{}));
    case DataType::kBFloat16:
      return bfloat16_to_float(get(uint16_t{}));
    case DataType::kFloat32:
      return get(float{});
    case DataType::kFloat64:
      return get(double{});
  }
  return 0;
}

// Compares `count` elements of `got` (typed) with `expected`; the message names where.
Status compare(const std::string& what, DataType dtype, const void* got,
               const std::vector<double>& expected) {
  const char* p = static_cast<const char*>(got);
  for (size_t i = 0; i < expected.size(); ++i) {
    const double g = decode_one(dtype, p + i * dtype_size(dtype));
    if (g != expected[i]) {
      std::ostringstream os;
      os << what << " dtype " << dtype_name(dtype) << ": element " << i << " of " << expected.size()
         << " is " << g << ", expected " << expected[i];
      return Status::Internal(os.str());
    }
  }
  return Status::Ok();
}

// Rank r's input element i for a reduction with `op` in a group of `size`.
double input_value(ReduceOp op, DataType dtype, int r, int size, int64_t i) {
  switch (op) {
    case ReduceOp::kProduct: {
      // 1 or 2 (or -1, -2 for signed types): |product| <= 2^size stays small.
      double v = 1 + (r + i) % 2;
      if (!is_unsigned(dtype) && (r + 2 * i) % 3 == 0) v = -v;
      return v;
    }
    case ReduceOp::kAverage: {
      // base(i) + d(r) with sum over ranks of d(r) = 0, so the average is exactly base(i).
      const double base = 3 + i % 4;
      if (size % 2 == 1 && r == size - 1) return base;
      return base + (r % 2 == 0 ? 1 : -1);
    }
    default: {
      const double v = 1 + (r * 7 + i * 3) % 5;
      return is_unsigned(dtype) ? v : v - 3;
    }
  }
}

std::vector<double> inputs(ReduceOp op, DataType dtype, int r, int size, int64_t count) {
  std::vector<double> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = input_value(op, dtype, r, size, i);
  return v;
}

// The exact reduction across ranks of inputs(), before postscale.
std::vector<double> reduced(ReduceOp op, DataType dtype, int size, int64_t count) {
  std::vector<double> out = inputs(op, dtype, 0, size, count);
  for (int r = 1; r < size; ++r) {
    const std::vector<double> in = inputs(op, dtype, r, size, count);
    for (int64_t i = 0; i < count; ++i) {
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAverage:
          out[i] += in[i];
          break;
        case ReduceOp::kMin:
          out[i] = std::min(out[i], in[i]);
          break;
        case ReduceOp::kMax:
          out[i] = std::max(out[i], in[i]);
          break;
        case ReduceOp::kProduct:
          out[i] *= in[i];
          break;
      }
    }
  }
  if (op == ReduceOp::kAverage)
    for (double& v : out) v /= size;
  return out;
}

std::string label(const char* collective, ReduceOp op, int64_t count, const char* variant) {
  std::ostringstream os;
  os << collective << " op " << reduce_op_name(op) << " count " << count << " (" << variant << ")";
  return os.str();
}

struct Checker {
  Backend& b;
  std::vector<int64_t> counts;  // element counts of allreduce, broadcast and the patterns
  int rank = b.rank();
  int size = b.size();
  int passed = 0;

  // Runs one collective's status and comparison, counting a pass.
  Status expect(const std::string& what, Status call, DataType dtype, const void* got,
                const std::vector<double>& expected) {
    if (!call.ok()) return call.with_context(what + " dtype " + std::string(dtype_name(dtype)));
    KOLO_RETURN_IF_ERROR(compare(what, dtype, got, expected));
    ++passed;
    return Status::Ok();
  }

  Status allreduce(DataType dtype, ReduceOp op, int64_t count) {
    const std::vector<double> expected = reduced(op, dtype, size, count);
    const std::vector<char> in = encode(dtype, inputs(op, dtype, rank, size, count));
    std::vector<char> out(in.size() + 1);
    Reduction opts{op};
    KOLO_RETURN_IF_ERROR(expect(label("allreduce", op, count, "out of place"),
                                b.allreduce(in.data(), out.data(), count, dtype, opts), dtype,
                                out.data(), expected));
    std::vector<char> inplace = in;
    KOLO_RETURN_IF_ERROR(expect(label("allreduce", op, count, "in place"),
                                b.allreduce(inplace.data(), inplace.data(), count, dtype, opts),
                                dtype, inplace.data(), expected));
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
      // x2 before and x0.5 after are exact in every dtype, integers included.
      opts.prescale = 2.0;
      opts.postscale = 0.5;
      KOLO_RETURN_IF_ERROR(expect(label("allreduce", op, count, "prescale 2 postscale 0.5"),
                                  b.allreduce(in.data(), out.data(), count, dtype, opts), dtype,
                                  out.data(), expected));
    }
    return Status::Ok();
  }

  // allreduce_pieces (Note [Allreduce pieces]): `total` elements cut into pieces, each its own
  // buffer, the cut differing between ranks (only the total must agree: shm, the backend these
  // run on, accepts that, more than the Note asks of every backend). "coarse" mixes
  // members of 0 and 1 elements with ones that straddle shm chunk and region boundaries;
  // "fine" makes thousands of members of 0-3 elements. Even pieces are in place, odd ones out
  // of place. "plain on odd ranks": odd ranks call allreduce() on the total instead, which a
  // pieces call must match.
  static std::vector<int64_t> cut(int64_t total, bool fine, int rank) {
    static constexpr int64_t kCoarse[] = {0, 1, 5, 0, 1, 37, 300, 2, 1029, 1};
    std::vector<int64_t> pieces;
    for (int64_t j = 0, left = total; left > 0 || j == 0; ++j) {
      const int64_t want = fine ? (j + rank) % 4 : kCoarse[(j + rank) % std::size(kCoarse)];
      pieces.push_back(std::min(want, left));
      left -= pieces.back();
    }
    pieces.push_back(0);  // a trailing empty member
    return pieces;
  }

  Status allreduce_pieces(DataType dtype, ReduceOp op, int64_t total) {
    const std::vector<double> expected = reduced(op, dtype, size, total);
    const std::vector<char> in = encode(dtype, inputs(op, dtype, rank, size, total));
    const size_t es = dtype_size(dtype);
    struct Layout {
      const char* name;
      bool fine;
      bool plain;
    };
    for (const Layout& layout : {Layout{"coarse", false, false}, Layout{"fine", true, false},
                                 Layout{"plain on odd ranks", false, true}}) {
      std::vector<Reduction> reductions{{op}};
      if (op == ReduceOp::kSum || op == ReduceOp::kAverage) reductions.push_back({op, 2.0, 0.5});
      for (const Reduction& opts : reductions) {
        const std::vector<int64_t> counts = cut(total, layout.fine, rank);
        std::vector<std::vector<char>> ins, outs;
        std::vector<AllreducePiece> pieces;
        int64_t at = 0;
        for (size_t k = 0; k < counts.size(); ++k) {
          const char* from = in.data() + at * es;
          ins.emplace_back(from, from + counts[k] * es);
          outs.emplace_back(counts[k] * es + 1, 0);  // + 1: a piece's output is never empty
          at += counts[k];
        }
        for (size_t k = 0; k < counts.size(); ++k) {
          void* out = k % 2 == 0 ? ins[k].data() : outs[k].data();
          pieces.push_back({ins[k].data(), out, counts[k]});
        }
        std::vector<char> plain(in.size() + 1);
        const Status call = layout.plain && rank % 2 == 1
                                ? b.allreduce(in.data(), plain.data(), total, dtype, opts)
                                : b.allreduce_pieces(pieces, dtype, opts);
        std::vector<char> got;
        if (layout.plain && rank % 2 == 1) {
          got = plain;
        } else {
          for (size_t k = 0; k < counts.size(); ++k) {
            const std::vector<char>& out = k % 2 == 0 ? ins[k] : outs[k];
            got.insert(got.end(), out.begin(), out.begin() + counts[k] * es);
          }
        }
        std::ostringstream what;
        what << label("allreduce_pieces", op, total, layout.name) << " in " << counts.size()
             << " pieces" << (opts.prescale != 1.0 ? " prescale 2 postscale 0.5" : "");
        KOLO_RETURN_IF_ERROR(expect(what.str(), call, dtype, got.data(), expected));
      }
    }
    return Status::Ok();
  }

  // A backend without allreduce_pieces says so, naming itself and the op.
  Status pieces_unsupported() {
    float x = 1;
    const Status s = b.allreduce_pieces({{&x, &x, 1}}, DataType::kFloat32, {});
    const std::string want =
        "backend " + std::string(b.name()) + " does not support allreduce_pieces";
    if (s.code() != StatusCode::kUnsupported || s.message() != want)
      return Status::Internal("allreduce_pieces on " + std::string(b.name()) + ": expected " +
                              "Unsupported \"" + want + "\", got " + s.to_string());
    ++passed;
    return Status::Ok();
  }

  // Per-rank count patterns for allgather and reducescatter: equal, empty, uneven, one empty.
  std::vector<std::vector<int64_t>> count_patterns() const {
    std::vector<std::vector<int64_t>> patterns;
    for (int64_t n : counts) patterns.emplace_back(size, n);
    std::vector<int64_t> ramp(size), big(size), hole(size);
    for (int r = 0; r < size; ++r) {
      ramp[r] = r;  // rank 0 contributes nothing
      big[r] = 1000 + 13 * r;
      hole[r] = r == size / 2 ? 0 : 7 + 2 * r;
    }
    patterns.push_back(ramp);
    patterns.push_back(big);
    patterns.push_back(hole);
    return patterns;
  }

  static std::string describe(const char* collective, const std::vector<int64_t>& counts) {
    std::ostringstream os;
    os << collective << " counts [";
    for (size_t i = 0; i < counts.size(); ++i) os << (i ? "," : "") << counts[i];
    os << "]";
    return os.str();
  }

  Status allgather(DataType dtype, const std::vector<int64_t>& counts) {
    std::vector<double> expected;
    std::vector<int64_t> displs;
    for (int r = 0; r < size; ++r) {
      displs.push_back(static_cast<int64_t>(expected.size()));
      for (int64_t i = 0; i < counts[r]; ++i) expected.push_back((r * 31 + i) % 100);
    }
    std::vector<double> mine(expected.begin() + displs[rank],
                             expected.begin() + displs[rank] + counts[rank]);
    const std::vector<char> in = encode(dtype, mine);
    std::vector<char> out(expected.size() * dtype_size(dtype) + 1);
    const std::string what = describe("allgather", counts);
    KOLO_RETURN_IF_ERROR(expect(what + " (out of place)",
                                b.allgather(in.data(), out.data(), dtype, counts), dtype,
                                out.data(), expected));
    // In place: the input already sits in this rank's slot of the output.
    std::vector<char> io(out.size(), 0);
    char* slot = io.data() + displs[rank] * dtype_size(dtype);
    if (!in.empty()) std::memcpy(slot, in.data(), in.size());
    return expect(what + " (in place)", b.allgather(slot, io.data(), dtype, counts), dtype,
                  io.data(), expected);
  }

  Status broadcast(DataType dtype, int64_t count, int root) {
    std::vector<double> expected(count);
    for (int64_t i = 0; i < count; ++i) expected[i] = (i * 11 + root) % 120;
    std::vector<char> data =
        rank == root ? encode(dtype, expected) : std::vector<char>(count * dtype_size(dtype), 0);
    return expect("broadcast count " + std::to_string(count) + " root " + std::to_string(root),
                  b.broadcast(data.data(), count, dtype, root), dtype, data.data(), expected);
  }

  Status alltoall(DataType dtype, int pattern) {
    // split(r, j): elements rank r sends to rank j.
    auto split = [pattern](int r, int j) -> int64_t {
      switch (pattern) {
        case 0:
          return 0;
        case 1:
          return 1;
        case 2:
          return (r + 2 * j) % 3;  // uneven, with empty pairs
        default:
          return 100 + 7 * r + j;
      }
    };
    auto value = [](int from, int to, int64_t k) -> double {
      return (from * 17 + to * 5 + k) % 100;
    };
    std::vector<int64_t> send_counts, recv_counts;
    std::vector<double> send, expected;
    for (int j = 0; j < size; ++j) {
      send_counts.push_back(split(rank, j));
      recv_counts.push_back(split(j, rank));
      for (int64_t k = 0; k < split(rank, j); ++k) send.push_back(value(rank, j, k));
      for (int64_t k = 0; k < split(j, rank); ++k) expected.push_back(value(j, rank, k));
    }
    const std::vector<char> in = encode(dtype, send);
    std::vector<char> out(expected.size() * dtype_size(dtype) + 1);
    return expect(describe("alltoall", send_counts) + " pattern " + std::to_string(pattern),
                  b.alltoall(in.data(), out.data(), dtype, send_counts, recv_counts), dtype,
                  out.data(), expected);
  }

  Status reducescatter(DataType dtype, ReduceOp op, const std::vector<int64_t>& counts) {
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
    const std::vector<double> all = reduced(op, dtype, size, total);
    const std::vector<double> expected(all.begin() + offset, all.begin() + offset + counts[rank]);
    const std::vector<char> in = encode(dtype, inputs(op, dtype, rank, size, total));
    std::vector<char> out(counts[rank] * dtype_size(dtype) + 1);
    Reduction opts{op};
    const std::string what =
        describe("reducescatter", counts) + " op " + std::string(reduce_op_name(op));
    KOLO_RETURN_IF_ERROR(expect(what, b.reducescatter(in.data(), out.data(), dtype, opts, counts),
                                dtype, out.data(), expected));
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
      opts.prescale = 2.0;
      opts.postscale = 0.5;
      KOLO_RETURN_IF_ERROR(expect(what + " prescale 2 postscale 0.5",
                                  b.reducescatter(in.data(), out.data(), dtype, opts, counts),
                                  dtype, out.data(), expected));
    }
    return Status::Ok();
  }

  // Bad arguments fail locally with InvalidArgument on every rank, before any byte is sent,
  // so every rank can check them without a matching call elsewhere.
  Status invalid_arguments() {
    float x = 0;
    auto expect_invalid = [this](const char* what, Status s) -> Status {
      if (s.code() != StatusCode::kInvalidArgument)
        return Status::Internal(std::string(what) + ": expected InvalidArgument, got " +
                                s.to_string());
      ++passed;
      return Status::Ok();
    };
    KOLO_RETURN_IF_ERROR(
        expect_invalid("allreduce count -3", b.allreduce(&x, &x, -3, DataType::kFloat32, {})));
    KOLO_RETURN_IF_ERROR(expect_invalid("allreduce null input",
                                        b.allreduce(nullptr, &x, 1, DataType::kFloat32, {})));
    KOLO_RETURN_IF_ERROR(expect_invalid("allreduce bad dtype",
                                        b.allreduce(&x, &x, 1, static_cast<DataType>(99), {})));
    KOLO_RETURN_IF_ERROR(
        expect_invalid("allreduce bad reduce op",
                       b.allreduce(&x, &x, 1, DataType::kFloat32, {static_cast<ReduceOp>(42)})));
    KOLO_RETURN_IF_ERROR(expect_invalid(
        "allreduce infinite postscale",
        b.allreduce(&x, &x, 1, DataType::kFloat32, {ReduceOp::kSum, 1.0, HUGE_VAL})));
    KOLO_RETURN_IF_ERROR(expect_invalid("broadcast root out of range",
                                        b.broadcast(&x, 1, DataType::kFloat32, size)));
    KOLO_RETURN_IF_ERROR(
        expect_invalid("allgather counts of wrong length",
                       b.allgather(&x, &x, DataType::kFloat32, std::vector<int64_t>(size + 1, 1))));
    KOLO_RETURN_IF_ERROR(expect_invalid(
        "reducescatter NaN prescale",
        b.reducescatter(&x, &x, DataType::kFloat32, {ReduceOp::kSum, std::nan(""), 1.0},
                        std::vector<int64_t>(size, 0))));
    float y = 0;
    KOLO_RETURN_IF_ERROR(
        expect_invalid("allreduce_pieces negative count",
                       b.allreduce_pieces({{&x, &x, 1}, {&y, &y, -2}}, DataType::kFloat32, {})));
    const Status null_output =
        b.allreduce_pieces({{&x, &x, 1}, {&y, nullptr, 1}}, DataType::kFloat32, {});
    if (null_output.message().find("pieces[1].output") == std::string::npos)
      return Status::Internal(
          "allreduce_pieces null output: expected a message naming "
          "pieces[1].output, got " +
          null_output.to_string());
    KOLO_RETURN_IF_ERROR(expect_invalid("allreduce_pieces null output", null_output));
    return expect_invalid("alltoall negative recv count",
                          b.alltoall(&x, &x, DataType::kFloat32, std::vector<int64_t>(size, 1),
                                     std::vector<int64_t>(size, -1)));
  }

  // Issue 15: kAverage divides by the ranks and then applies the postscale. Multiplying by
  // postscale / size instead gives 27 * (13 / 3.0) = 116.99..., truncated to 116, with 3 ranks.
  Status average_then_postscale() {
    const Reduction avg{ReduceOp::kAverage, 1.0, 13.0};
    std::vector<int32_t> in(3, 9), out(3, -1);
    KOLO_RETURN_IF_ERROR(expect("allreduce int32 9 average postscale 13",
                                b.allreduce(in.data(), out.data(), 3, DataType::kInt32, avg),
                                DataType::kInt32, out.data(), {117, 117, 117}));
    const std::vector<int64_t> counts(size, 1);
    std::vector<int32_t> rs_in(size, 9);
    int32_t rs_out = -1;
    return expect("reducescatter int32 9 average postscale 13",
                  b.reducescatter(rs_in.data(), &rs_out, DataType::kInt32, avg, counts),
                  DataType::kInt32, &rs_out, {117});
  }
};

}  // namespace

Result<int> run_collective_checks(Backend& backend, std::vector<int64_t> counts) {
  if (counts.empty()) counts.assign(std::begin(kCounts), std::end(kCounts));
  Checker c{backend, counts};
  KOLO_RETURN_IF_ERROR(c.invalid_arguments());
  KOLO_RETURN_IF_ERROR(c.average_then_postscale());
  for (DataType dtype : kDtypes) {
    for (ReduceOp op : kOps)
      for (int64_t count : counts) KOLO_RETURN_IF_ERROR(c.allreduce(dtype, op, count));
    if (backend.has_allreduce_pieces())
      for (ReduceOp op : kOps)
        for (int64_t count : counts) KOLO_RETURN_IF_ERROR(c.allreduce_pieces(dtype, op, count));
    for (const auto& counts : c.count_patterns()) {
      KOLO_RETURN_IF_ERROR(c.allgather(dtype, counts));
      for (ReduceOp op : kOps) KOLO_RETURN_IF_ERROR(c.reducescatter(dtype, op, counts));
    }
    for (int64_t count : counts) {
      KOLO_RETURN_IF_ERROR(c.broadcast(dtype, count, 0));
      KOLO_RETURN_IF_ERROR(c.broadcast(dtype, count, c.size - 1));
    }
    for (int pattern = 0; pattern < 4; ++pattern) KOLO_RETURN_IF_ERROR(c.alltoall(dtype, pattern));
  }
  if (!backend.has_allreduce_pieces()) KOLO_RETURN_IF_ERROR(c.pieces_unsupported());
  for (int i = 0; i < 3; ++i) {
    KOLO_RETURN_IF_ERROR(backend.barrier().with_context("barrier"));
    ++c.passed;
  }
  return c.passed;
}

}  // namespace kolo::testing
