// TcpStore client. Each pooled connection has its own io_context, so a call runs its
// asynchronous write/read chain with io.run_until(deadline): that is how a blocking call gets
// a timeout in Asio. A connection whose call did not finish cleanly is discarded, never reused,
// because its stream position is unknown.
#include <fcntl.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <thread>

#include "rendezvous/asio.h"
#include "rendezvous/store_common.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_protocol.h"

namespace kolo {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace tcp_store;

struct TcpStore::Connection {
  asio::io_context io;
  tcp::socket socket{io};
  std::optional<FrameMac> mac;  // set by authenticate()
};

namespace {

// now + a + b, saturating: a timeout as long as milliseconds::max() means no limit, not an
// overflow.
Clock::time_point deadline_after(std::chrono::milliseconds a, std::chrono::milliseconds b) {
  const auto now = Clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      Clock::time_point::max() - now - std::chrono::milliseconds(1));
  if (a >= room || b >= room - a) return Clock::time_point::max();
  return now + a + b;
}

// Reads or writes exactly n bytes before deadline; timed_out (and a closed socket) after it.
boost::system::error_code transfer(TcpStore::Connection& c, bool write, void* data, size_t n,
                                   Clock::time_point deadline) {
  boost::system::error_code ec;
  bool done = false;
  auto handler = [&](boost::system::error_code e, size_t) {
    ec = e;
    done = true;
  };
  c.io.restart();
  if (write)
    asio::async_write(c.socket, asio::buffer(data, n), handler);
  else
    asio::async_read(c.socket, asio::buffer(data, n), handler);
  c.io.run_until(deadline);
  if (done) return ec;
  boost::system::error_code ignored;
  c.socket.close(ignored);
  c.io.restart();
  c.io.run();  // let the cancelled handler run before the locals it captured go away
  return asio::error::timed_out;
}

// One connection attempt to any resolved endpoint, bounded by deadline.
boost::system::error_code connect_once(TcpStore::Connection& c, const HostPort& addr,
                                       Clock::time_point deadline) {
  boost::system::error_code ec;
  tcp::resolver resolver(c.io);
  auto endpoints =
      resolver.resolve(addr.host, std::to_string(addr.port), tcp::resolver::numeric_service, ec);
  if (ec) return ec;
  bool done = false;
  c.io.restart();
  asio::async_connect(c.socket, endpoints, [&](boost::system::error_code e, const tcp::endpoint&) {
    ec = e;
    done = true;
  });
  c.io.run_until(deadline);
  if (!done) {
    boost::system::error_code ignored;
    c.socket.close(ignored);
    c.io.restart();
    c.io.run();  // let the cancelled handler run before the locals it captured go away
    return asio::error::timed_out;
  }
  if (!ec) c.socket.set_option(tcp::no_delay(true), ec);
  if (!ec) ::fcntl(c.socket.native_handle(), F_SETFD, FD_CLOEXEC);  // not into spawned workers
  return ec;
}

// The client side of Note [TcpStore authentication]. An I/O error is worth another connection
// (the server may have dropped this one to make room); a refused secret is not (PeerFailure).
Status authenticate(TcpStore::Connection& c, const AuthKey& key, const HostPort& addr,
                    Clock::time_point deadline) {
  const std::string where = "store at " + addr.to_string();
  const Nonce mine = random_nonce();
  auto hello = encode_hello(mine);
  std::array<uint8_t, kChallengeBytes> challenge{};
  boost::system::error_code ec = transfer(c, true, hello.data(), hello.size(), deadline);
  if (!ec) ec = transfer(c, false, challenge.data(), challenge.size(), deadline);
  if (ec) return Status::IoError(where + ": authentication failed: " + ec.message());
  Nonce theirs{};
  Tag tag{};
  std::copy(challenge.begin(), challenge.begin() + kNonceBytes, theirs.begin());
  std::copy(challenge.begin() + kNonceBytes, challenge.end(), tag.begin());
  if (!tags_equal(tag, server_tag(key, mine, theirs)))
    return Status::PeerFailure(where +
                               " does not know this job's secret: it is another job's store, or "
                               "KOLO_SECRET differs from the one its kolorun was given");
  Tag proof = client_tag(key, mine, theirs);
  std::array<uint8_t, kVerdictBytes> verdict{};
  ec = transfer(c, true, proof.data(), proof.size(), deadline);
  if (!ec) ec = transfer(c, false, verdict.data(), verdict.size(), deadline);
  // The server closes right after refusing, so a refusal can also arrive as an end of stream.
  if (ec && ec != asio::error::eof)
    return Status::IoError(where + ": authentication failed: " + ec.message());
  if (ec || verdict[0] != 1)
    return Status::PeerFailure(where +
                               " refused this process's proof of the job secret: KOLO_SECRET "
                               "differs from the one its kolorun was given");
  c.mac.emplace(key, mine, theirs, /*server_side=*/false);
  return Status::Ok();
}

}  // namespace

TcpStore::TcpStore(HostPort address, std::string_view secret,
                   std::chrono::milliseconds connect_timeout, std::chrono::milliseconds io_timeout)
    : address_(std::move(address)),
      key_(derive_auth_key(secret)),
      connect_timeout_(connect_timeout),
      io_timeout_(io_timeout) {}

TcpStore::~TcpStore() = default;

Result<std::unique_ptr<TcpStore>> TcpStore::connect(const HostPort& address,
                                                    std::string_view secret,
                                                    std::chrono::milliseconds connect_timeout,
                                                    std::chrono::milliseconds io_timeout) {
  if (address.port <= 0 || address.port > 65535)
    return Status::InvalidArgument("TcpStore::connect: port must be in 1..65535, got " +
                                   std::to_string(address.port));
  if (secret.empty())
    return Status::InvalidArgument("TcpStore::connect: the job secret must not be empty");
  std::unique_ptr<TcpStore> store(new TcpStore(address, secret, connect_timeout, io_timeout));
  KOLO_ASSIGN_OR_RETURN(auto first, store->acquire());
  store->release(std::move(first));
  return store;
}

Result<std::unique_ptr<TcpStore::Connection>> TcpStore::acquire() {
  {
    MutexLock lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  // The server may not be listening yet (another node's kolorun still starting): retry
  // refused or failed attempts with a growing pause until connect_timeout. The last pause is
  // cut short so that the last attempt starts just before the deadline: a pause that would
  // overrun it used to end the retries up to 500 ms early, a rank giving up after 2.6 s of
  // `--timeout 3s` (issue 27).
  constexpr auto kLastAttempt = std::chrono::milliseconds(10);
  auto deadline = deadline_after(connect_timeout_, std::chrono::milliseconds(0));
  auto pause = std::chrono::milliseconds(20);
  std::string last_error;
  while (true) {
    auto c = std::make_unique<Connection>();
    boost::system::error_code ec = connect_once(*c, address_, deadline);
    if (!ec) {
      Status st = authenticate(*c, key_, address_, deadline);
      if (st.ok()) return c;
      if (st.code() == StatusCode::kPeerFailure) return st;
      last_error = st.message();
    } else {
      last_error = ec.message();
    }
    const auto left = deadline - Clock::now();
    if (left <= kLastAttempt) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, left - kLastAttempt));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  return Status::IoError("store: cannot connect to " + address_.to_string() + " within " +
                         store_internal::format_ms(connect_timeout_) + ": " + last_error +
                         " (is kolorun's store server running at KOLO_STORE_ADDR?)");
}

void TcpStore::release(std::unique_ptr<Connection> c) {
  MutexLock lock(mu_);
  idle_.push_back(std::move(c));
}

namespace {

// Sends one request and reads its reply within deadline. The reply's buffer grows with the
// bytes that arrive, like the server's (tcp_store_server.cc).
Result<Response> roundtrip(TcpStore::Connection& c, const HostPort& addr, const Request& req,
                           Clock::time_point deadline) {
  const std::string where = "store at " + addr.to_string();
  std::string out = c.mac->seal(encode_request(req));
  unsigned char header[4];
  boost::system::error_code ec = transfer(c, true, out.data(), out.size(), deadline);
  if (!ec) ec = transfer(c, false, header, sizeof header, deadline);
  uint32_t want = ec ? 0 : decode_length(header);
  if (!ec && (want <= kTagBytes || want > kMaxFrameBytes))
    return Status::IoError(where + ": reply frame has an invalid length");
  std::string body;
  while (!ec && body.size() < want) {
    const size_t have = body.size();
    const size_t step = std::min<size_t>(want - have, std::max<size_t>(have, 4096));
    body.resize(have + step);
    ec = transfer(c, false, body.data() + have, step, deadline);
  }
  if (ec == asio::error::timed_out)
    return Status::IoError(where +
                           ": no reply before the I/O deadline; the server may be stuck or gone");
  if (ec) return Status::IoError(where + ": connection failed: " + ec.message());
  if (!c.mac->open(body))
    return Status::IoError(where + ": a reply failed its integrity check (altered on the way?)");
  auto resp = decode_response(req.op, body);
  if (!resp) return Status::IoError(where + ": malformed reply frame");
  return std::move(*resp);
}

// What a transport error was doing, e.g. `store get "kolo/s0/x"`: a lost or garbled
// connection names the call it broke (the server's own errors name it already).
std::string describe(const Request& req) {
  static constexpr const char* kNames[] = {"?", "set", "get", "wait", "add", "check"};
  const auto op = static_cast<size_t>(req.op);
  std::string what = std::string("store ") + (op < std::size(kNames) ? kNames[op] : "?");
  if (!req.keys.empty()) what += " \"" + req.keys.front() + "\"";
  if (req.keys.size() > 1) what += " (and " + std::to_string(req.keys.size() - 1) + " more keys)";
  return what;
}

}  // namespace

// The deadline is the server-side wait (if any, as the server clamps it) plus io_timeout, so a
// slow network never turns a successful wait into an error.
Result<Response> TcpStore::call(const Request& req, std::chrono::milliseconds server_wait) {
  const auto clamped = std::min<std::chrono::milliseconds>(
      server_wait, std::chrono::milliseconds(static_cast<int64_t>(kMaxTimeoutMs)));
  const std::string what = describe(req);
  auto conn = acquire();
  if (!conn.ok()) return conn.status().with_context(what);
  Result<Response> got = roundtrip(**conn, address_, req, deadline_after(clamped, io_timeout_));
  if (!got.ok()) return got.status().with_context(what);
  Response resp = std::move(*got);
  release(std::move(*conn));  // only a connection whose reply was read whole goes back
  if (resp.reply == Reply::kError) {
    // A code this build does not know (a newer or broken server) still fails, as Internal.
    auto code =
        resp.error_code > static_cast<uint8_t>(StatusCode::kInternal) || resp.error_code == 0
            ? StatusCode::kInternal
            : static_cast<StatusCode>(resp.error_code);
    return Status(code, resp.error_message);
  }
  return resp;
}

Status TcpStore::set(const std::string& key, const std::string& value) {
  KOLO_RETURN_IF_ERROR(store_internal::validate_key("store set", key));
  KOLO_RETURN_IF_ERROR(store_internal::validate_value("store set", key, value));
  Request req{Op::kSet, {key}, value, 0, 0};
  KOLO_ASSIGN_OR_RETURN(Response resp, call(req, std::chrono::milliseconds(0)));
  return Status::Ok();
}

Result<std::string> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  KOLO_RETURN_IF_ERROR(store_internal::validate_key("store get", key));
  KOLO_RETURN_IF_ERROR(store_internal::validate_timeout("store get", timeout));
  Request req{Op::kGet, {key}, {}, 0, static_cast<uint64_t>(timeout.count())};
  KOLO_ASSIGN_OR_RETURN(Response resp, call(req, timeout));
  if (resp.reply == Reply::kTimeout)
    return store_internal::missing_keys_timeout("get", timeout, resp.missing);
  return std::move(resp.value);
}

Status TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const auto& k : keys) KOLO_RETURN_IF_ERROR(store_internal::validate_key("store wait", k));
  KOLO_RETURN_IF_ERROR(store_internal::validate_timeout("store wait", timeout));
  if (keys.empty()) return Status::Ok();
  if (keys.size() > kMaxWaitKeys)
    return Status::InvalidArgument("store wait: at most " + std::to_string(kMaxWaitKeys) +
                                   " keys per call, got " + std::to_string(keys.size()));
  Request req{Op::kWait, keys, {}, 0, static_cast<uint64_t>(timeout.count())};
  KOLO_ASSIGN_OR_RETURN(Response resp, call(req, timeout));
  if (resp.reply == Reply::kTimeout)
    return store_internal::missing_keys_timeout("wait", timeout, resp.missing);
  return Status::Ok();
}

Result<int64_t> TcpStore::add(const std::string& key, int64_t delta) {
  KOLO_RETURN_IF_ERROR(store_internal::validate_key("store add", key));
  Request req{Op::kAdd, {key}, {}, delta, 0};
  KOLO_ASSIGN_OR_RETURN(Response resp, call(req, std::chrono::milliseconds(0)));
  return resp.number;
}

Result<bool> TcpStore::check(const std::string& key) {
  KOLO_RETURN_IF_ERROR(store_internal::validate_key("store check", key));
  Request req{Op::kCheck, {key}, {}, 0, 0};
  KOLO_ASSIGN_OR_RETURN(Response resp, call(req, std::chrono::milliseconds(0)));
  return resp.number != 0;
}

}  // namespace kolo
