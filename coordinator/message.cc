#include "coordinator/message.h"

#include <cstring>
#include <type_traits>

#include "common/knobs.h"

namespace kolo::coord {

const char* op_type_name(OpType type) {
  switch (type) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kJoin:
      return "join";
  }
  return "unknown";
}

int64_t num_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// Little-endian host assumed (x86/ARM); both ends are the same build of Kolo.
class Writer {
 public:
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out_.append(s);
  }
  void ints(const std::vector<int64_t>& v) {
    pod<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  void ints32(const std::vector<int32_t>& v) {
    pod<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
  }
  void shapes(const std::vector<std::vector<int64_t>>& v) {
    pod<uint64_t>(v.size());
    for (const auto& s : v) ints(s);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  bool done() const { return pos_ == in_.size(); }

  template <typename T>
  T pod(const char* what) {
    T v{};
    if (!need(sizeof(T), what)) return v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    uint64_t n = pod<uint64_t>(what);
    if (failed() || !need(n, what)) return {};
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<int64_t> ints(const char* what) { return vec<int64_t>(what); }
  std::vector<int32_t> ints32(const char* what) { return vec<int32_t>(what); }
  std::vector<std::vector<int64_t>> shapes(const char* what) {
    uint64_t n = pod<uint64_t>(what);
    std::vector<std::vector<int64_t>> out;
    // Each shape takes at least 8 bytes, which bounds n before we reserve anything.
    if (failed() || !need_count(n, sizeof(uint64_t), what)) return out;
    out.reserve(n);
    for (uint64_t i = 0; i < n && !failed(); ++i) out.push_back(ints(what));
    return out;
  }
  template <typename E>
  E enumeration(const char* what, int limit) {
    uint8_t v = pod<uint8_t>(what);
    if (!failed() && v >= limit)
      fail(std::string(what) + " has invalid value " + std::to_string(v));
    return static_cast<E>(v);
  }
  void fail(std::string msg) {
    if (error_.empty()) error_ = std::move(msg);
  }
  // Whether n items of `unit` bytes each fit in what is left (fails otherwise); bounds a
  // count before anything is reserved for it.
  bool need_count(uint64_t n, size_t unit, const char* what) {
    if (n > (in_.size() - pos_) / unit) {
      fail(std::string("truncated message: ") + what + " claims " + std::to_string(n) +
           " items but only " + std::to_string(in_.size() - pos_) + " bytes remain");
      return false;
    }
    return true;
  }

 private:
  template <typename T>
  std::vector<T> vec(const char* what) {
    uint64_t n = pod<uint64_t>(what);
    std::vector<T> out;
    if (failed() || !need_count(n, sizeof(T), what)) return out;
    out.resize(n);
    // An empty vector's data() may be null, which memcpy may not be given even for 0 bytes.
    if (n > 0) std::memcpy(out.data(), in_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return out;
  }
  bool need(uint64_t n, const char* what) { return need_count(n, 1, what); }

  const std::string& in_;
  size_t pos_ = 0;
  std::string error_;
};

void write_device(Writer& w, Device d) {
  w.pod<uint8_t>(static_cast<uint8_t>(d.kind));
  w.pod<int32_t>(d.index);
}
Device read_device(Reader& r) {
  Device d;
  d.kind = r.enumeration<DeviceKind>("device kind", 2);
  d.index = r.pod<int32_t>("device index");
  return d;
}

void write_request(Writer& w, const Request& q) {
  w.str(q.name);
  w.pod<uint8_t>(static_cast<uint8_t>(q.type));
  w.pod<uint8_t>(static_cast<uint8_t>(q.dtype));
  write_device(w, q.device);
  w.pod<uint8_t>(static_cast<uint8_t>(q.reduction.op));
  w.pod<double>(q.reduction.prescale);
  w.pod<double>(q.reduction.postscale);
  w.pod<int32_t>(q.root);
  w.shapes(q.shapes);
  w.ints(q.splits);
}
Request read_request(Reader& r) {
  Request q;
  q.name = r.str("request name");
  q.type = r.enumeration<OpType>("op type", kNumOpTypes);
  q.dtype = r.enumeration<DataType>("dtype", kNumDataTypes);
  q.device = read_device(r);
  q.reduction.op = r.enumeration<ReduceOp>("reduce op", kNumReduceOps);
  q.reduction.prescale = r.pod<double>("prescale");
  q.reduction.postscale = r.pod<double>("postscale");
  q.root = r.pod<int32_t>("root");
  q.shapes = r.shapes("shapes");
  q.splits = r.ints("splits");
  return q;
}

void write_response(Writer& w, const Response& p) {
  w.pod<uint8_t>(static_cast<uint8_t>(p.kind));
  w.str(p.name);
  w.pod<uint8_t>(static_cast<uint8_t>(p.type));
  w.pod<uint8_t>(static_cast<uint8_t>(p.dtype));
  write_device(w, p.device);
  w.pod<uint8_t>(static_cast<uint8_t>(p.reduction.op));
  w.pod<double>(p.reduction.prescale);
  w.pod<double>(p.reduction.postscale);
  w.pod<int32_t>(p.root);
  w.shapes(p.shapes);
  w.ints(p.rank_dims);
  w.ints32(p.joined);
  w.pod<uint8_t>(static_cast<uint8_t>(p.error_code));
  w.str(p.error);
}
Response read_response(Reader& r) {
  Response p;
  p.kind = r.enumeration<Response::Kind>("response kind", 2);
  p.name = r.str("response name");
  p.type = r.enumeration<OpType>("op type", kNumOpTypes);
  p.dtype = r.enumeration<DataType>("dtype", kNumDataTypes);
  p.device = read_device(r);
  p.reduction.op = r.enumeration<ReduceOp>("reduce op", kNumReduceOps);
  p.reduction.prescale = r.pod<double>("prescale");
  p.reduction.postscale = r.pod<double>("postscale");
  p.root = r.pod<int32_t>("root");
  p.shapes = r.shapes("shapes");
  p.rank_dims = r.ints("rank dims");
  p.joined = r.ints32("joined");
  p.error_code =
      r.enumeration<StatusCode>("error code", static_cast<int>(StatusCode::kWorldChanged) + 1);
  p.error = r.str("error");
  return p;
}

std::vector<TunedChoice> read_choices(Reader& r) {
  std::vector<TunedChoice> out;
  const uint64_t n = r.pod<uint64_t>("tune choice count");
  if (r.failed() || !r.need_count(n, 2 * sizeof(int32_t), "tune choices")) return out;
  out.reserve(n);
  for (uint64_t i = 0; i < n && !r.failed(); ++i) {
    TunedChoice c;
    c.knob = r.pod<int32_t>("tune choice knob");
    c.choice = r.pod<int32_t>("tune choice");
    if (!r.failed() && (c.knob < 0 || c.knob >= static_cast<int32_t>(kKnobCount) || c.choice < 0))
      r.fail("tune choice has invalid knob " + std::to_string(c.knob) + " or choice " +
             std::to_string(c.choice));
    out.push_back(c);
  }
  return out;
}

Status finish(const Reader& r, const char* what) {
  if (r.failed()) return Status::Internal(std::string("malformed ") + what + ": " + r.error());
  if (!r.done()) return Status::Internal(std::string("malformed ") + what + ": trailing bytes");
  return Status::Ok();
}

}  // namespace

std::string serialize(const RequestList& list) {
  Writer w;
  w.pod<uint8_t>(list.shutdown ? 1 : 0);
  w.pod<uint8_t>(list.join ? 1 : 0);
  w.pod<uint64_t>(list.requests.size());
  for (const auto& q : list.requests) write_request(w, q);
  return w.take();
}

Result<RequestList> parse_request_list(const std::string& bytes) {
  Reader r(bytes);
  RequestList list;
  list.shutdown = r.pod<uint8_t>("shutdown flag") != 0;
  list.join = r.pod<uint8_t>("join flag") != 0;
  uint64_t n = r.pod<uint64_t>("request count");
  for (uint64_t i = 0; i < n && !r.failed(); ++i) list.requests.push_back(read_request(r));
  KOLO_RETURN_IF_ERROR(finish(r, "request list"));
  return list;
}

std::string serialize(const ResponseList& list) {
  Writer w;
  w.pod<int32_t>(list.shutdown_rank);
  w.str(list.fatal);
  w.ints32(list.joined);
  w.pod<uint64_t>(list.evictions.size());
  for (const auto& e : list.evictions) w.str(e);
  w.pod<uint64_t>(list.responses.size());
  for (const auto& p : list.responses) write_response(w, p);
  w.pod(list.tune.apply_step);
  w.pod(list.tune.fusion_threshold);
  w.pod(list.tune.cycle_time_ns);
  w.pod(list.tune.bucket_bytes);
  w.pod<uint64_t>(list.tune.choices.size());
  for (const TunedChoice& c : list.tune.choices) {
    w.pod(c.knob);
    w.pod(c.choice);
  }
  return w.take();
}

Result<ResponseList> parse_response_list(const std::string& bytes) {
  Reader r(bytes);
  ResponseList list;
  list.shutdown_rank = r.pod<int32_t>("shutdown rank");
  list.fatal = r.str("fatal");
  list.joined = r.ints32("joined");
  uint64_t n = r.pod<uint64_t>("eviction count");
  for (uint64_t i = 0; i < n && !r.failed(); ++i) list.evictions.push_back(r.str("eviction"));
  n = r.pod<uint64_t>("response count");
  for (uint64_t i = 0; i < n && !r.failed(); ++i) list.responses.push_back(read_response(r));
  list.tune.apply_step = r.pod<int64_t>("tune step");
  list.tune.fusion_threshold = r.pod<uint64_t>("tune threshold");
  list.tune.cycle_time_ns = r.pod<int64_t>("tune cycle time");
  list.tune.bucket_bytes = r.pod<int64_t>("tune bucket");
  list.tune.choices = read_choices(r);
  KOLO_RETURN_IF_ERROR(finish(r, "response list"));
  return list;
}

}  // namespace kolo::coord
