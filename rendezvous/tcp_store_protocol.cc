#include "rendezvous/tcp_store_protocol.h"

#include <algorithm>
#include <cstring>

namespace kolo::tcp_store {
namespace {

class Writer {
 public:
  Writer() { out_.resize(4); }  // room for the length prefix
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out_.push_back(static_cast<char>((v >> s) & 0xff));
  }
  void u64(uint64_t v) {
    for (int s = 56; s >= 0; s -= 8) out_.push_back(static_cast<char>((v >> s) & 0xff));
  }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string finish() {
    uint32_t n = static_cast<uint32_t>(out_.size() - 4);
    for (int i = 0; i < 4; ++i) out_[i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
    return std::move(out_);
  }

 private:
  std::string out_;
};

// Every read checks the remaining length first, so a lying length field can never make us read
// past the body or allocate more than the body's own size.
class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}
  bool u8(uint8_t& v) {
    if (left() < 1) return false;
    v = static_cast<uint8_t>(b_[pos_++]);
    return true;
  }
  bool u32(uint32_t& v) {
    if (left() < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(b_[pos_++]);
    return true;
  }
  bool u64(uint64_t& v) {
    if (left() < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(b_[pos_++]);
    return true;
  }
  bool str(std::string& s) {
    uint32_t n = 0;
    if (!u32(n) || n > left()) return false;
    s.assign(b_, pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  size_t left() const { return b_.size() - pos_; }
  const std::string& b_;
  size_t pos_ = 0;
};

}  // namespace

uint32_t decode_length(const unsigned char h[4]) {
  return (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | h[3];
}

std::string encode_request(const Request& r) {
  Writer w;
  w.u8(static_cast<uint8_t>(r.op));
  switch (r.op) {
    case Op::kSet:
      w.str(r.keys.at(0));
      w.str(r.value);
      break;
    case Op::kGet:
      w.u64(r.timeout_ms);
      w.str(r.keys.at(0));
      break;
    case Op::kWait:
      w.u64(r.timeout_ms);
      w.u32(static_cast<uint32_t>(r.keys.size()));
      for (const auto& k : r.keys) w.str(k);
      break;
    case Op::kAdd:
      w.u64(static_cast<uint64_t>(r.delta));
      w.str(r.keys.at(0));
      break;
    case Op::kCheck:
      w.str(r.keys.at(0));
      break;
  }
  return w.finish();
}

std::optional<Request> decode_request(const std::string& body) {
  Reader rd(body);
  Request r;
  uint8_t op = 0;
  if (!rd.u8(op)) return std::nullopt;
  r.op = static_cast<Op>(op);
  std::string key;
  switch (r.op) {
    case Op::kSet:
      if (!rd.str(key) || !rd.str(r.value)) return std::nullopt;
      r.keys.push_back(std::move(key));
      break;
    case Op::kGet:
      if (!rd.u64(r.timeout_ms) || !rd.str(key)) return std::nullopt;
      r.keys.push_back(std::move(key));
      break;
    case Op::kWait: {
      uint32_t n = 0;
      if (!rd.u64(r.timeout_ms) || !rd.u32(n) || n > kMaxWaitKeys) return std::nullopt;
      for (uint32_t i = 0; i < n; ++i) {
        if (!rd.str(key)) return std::nullopt;
        r.keys.push_back(std::move(key));
      }
      break;
    }
    case Op::kAdd: {
      uint64_t d = 0;
      if (!rd.u64(d) || !rd.str(key)) return std::nullopt;
      r.delta = static_cast<int64_t>(d);
      r.keys.push_back(std::move(key));
      break;
    }
    case Op::kCheck:
      if (!rd.str(key)) return std::nullopt;
      r.keys.push_back(std::move(key));
      break;
    default:
      return std::nullopt;
  }
  if (!rd.done()) return std::nullopt;
  return r;
}

std::string encode_response(Op op, const Response& r) {
  Writer w;
  w.u8(static_cast<uint8_t>(r.reply));
  if (r.reply == Reply::kTimeout) {
    w.u32(static_cast<uint32_t>(r.missing.size()));
    for (const auto& k : r.missing) w.str(k);
  } else if (r.reply == Reply::kError) {
    w.u8(r.error_code);
    w.str(r.error_message);
  } else if (op == Op::kGet) {
    w.str(r.value);
  } else if (op == Op::kAdd) {
    w.u64(static_cast<uint64_t>(r.number));
  } else if (op == Op::kCheck) {
    w.u8(r.number ? 1 : 0);
  }
  return w.finish();
}

std::optional<Response> decode_response(Op op, const std::string& body) {
  Reader rd(body);
  Response r;
  uint8_t reply = 0;
  if (!rd.u8(reply)) return std::nullopt;
  r.reply = static_cast<Reply>(reply);
  if (r.reply == Reply::kTimeout) {
    uint32_t n = 0;
    if (!rd.u32(n) || n > kMaxWaitKeys) return std::nullopt;
    std::string k;
    for (uint32_t i = 0; i < n; ++i) {
      if (!rd.str(k)) return std::nullopt;
      r.missing.push_back(std::move(k));
    }
  } else if (r.reply == Reply::kError) {
    if (!rd.u8(r.error_code) || !rd.str(r.error_message)) return std::nullopt;
  } else if (r.reply == Reply::kOk) {
    if (op == Op::kGet) {
      if (!rd.str(r.value)) return std::nullopt;
    } else if (op == Op::kAdd) {
      uint64_t v = 0;
      if (!rd.u64(v)) return std::nullopt;
      r.number = static_cast<int64_t>(v);
    } else if (op == Op::kCheck) {
      uint8_t b = 0;
      if (!rd.u8(b) || b > 1) return std::nullopt;
      r.number = b;
    }
  } else {
    return std::nullopt;
  }
  if (!rd.done()) return std::nullopt;
  return r;
}

namespace {
constexpr uint8_t kHelloMagic[4] = {'K', 'S', 'A', '1'};

Tag handshake_tag(const AuthKey& job, std::string_view label, const Nonce& client,
                  const Nonce& server) {
  std::vector<uint8_t> m(label.begin(), label.end());
  m.insert(m.end(), client.begin(), client.end());
  m.insert(m.end(), server.begin(), server.end());
  return auth_tag(job, m);
}
}  // namespace

std::array<uint8_t, kHelloBytes> encode_hello(const Nonce& client) {
  std::array<uint8_t, kHelloBytes> b{};
  std::copy(std::begin(kHelloMagic), std::end(kHelloMagic), b.begin());
  std::copy(client.begin(), client.end(), b.begin() + 4);
  return b;
}

std::optional<Nonce> decode_hello(std::span<const uint8_t> bytes) {
  if (bytes.size() != kHelloBytes || !std::equal(bytes.begin(), bytes.begin() + 4, kHelloMagic))
    return std::nullopt;
  Nonce n{};
  std::copy(bytes.begin() + 4, bytes.end(), n.begin());
  return n;
}

// Different labels: a server's tag is never a valid client proof (no reflection).
Tag server_tag(const AuthKey& job, const Nonce& client, const Nonce& server) {
  return handshake_tag(job, "kolo-store server", client, server);
}
Tag client_tag(const AuthKey& job, const Nonce& client, const Nonce& server) {
  return handshake_tag(job, "kolo-store client", client, server);
}

FrameMac::FrameMac(const AuthKey& job, const Nonce& client, const Nonce& server, bool server_side)
    : key_(derive_session_key(job, "kolo-store frames", client, server)),
      server_side_(server_side) {}

Tag FrameMac::tag(uint8_t direction, uint64_t sequence, std::string_view body) const {
  std::vector<uint8_t> m;
  m.reserve(9 + body.size());
  m.push_back(direction);
  for (int s = 56; s >= 0; s -= 8) m.push_back(static_cast<uint8_t>(sequence >> s));
  m.insert(m.end(), body.begin(), body.end());
  return auth_tag(key_, m);
}

std::string FrameMac::seal(std::string frame) {
  // Direction 0: client to server; 1: server to client.
  const Tag t = tag(server_side_ ? 1 : 0, sent_++, std::string_view(frame).substr(4));
  frame.append(reinterpret_cast<const char*>(t.data()), t.size());
  const uint32_t n = static_cast<uint32_t>(frame.size() - 4);
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  return frame;
}

bool FrameMac::open(std::string& body) {
  if (body.size() < kTagBytes) return false;
  const size_t n = body.size() - kTagBytes;
  Tag got{};
  std::copy(body.begin() + static_cast<std::ptrdiff_t>(n), body.end(), got.begin());
  if (!tags_equal(got, tag(server_side_ ? 0 : 1, received_, std::string_view(body).substr(0, n))))
    return false;
  ++received_;
  body.resize(n);
  return true;
}

}  // namespace kolo::tcp_store
