// TcpStore client. Each pooled connection has its own io_context, so a call runs its
// asynchronous write/read chain with io.run_until(deadline): that is how a blocking call gets
// a timeout in Asio. A connection whose call did not finish cleanly is discarded, never reused,
// because its stream position is unknown.
#include <fcntl.h>

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
};

namespace {

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

}  // namespace

TcpStore::TcpStore(HostPort address, std::chrono::milliseconds connect_timeout,
                   std::chrono::milliseconds io_timeout)
    : address_(std::move(address)), connect_timeout_(connect_timeout), io_timeout_(io_timeout) {}

TcpStore::~TcpStore() = default;

Result<std::unique_ptr<TcpStore>> TcpStore::connect(const HostPort& address,
                                                    std::chrono::milliseconds connect_timeout,
                                                    std::chrono::milliseconds io_timeout) {
  if (address.port <= 0 || address.port > 65535)
    return Status::InvalidArgument("TcpStore::connect: port must be in 1..65535, got " +
                                   std::to_string(address.port));
  std::unique_ptr<TcpStore> store(new TcpStore(address, connect_timeout, io_timeout));
  KOLO_ASSIGN_OR_RETURN(auto first, store->acquire());
  store->release(std::move(first));
  return store;
}

Result<std::unique_ptr<TcpStore::Connection>> TcpStore::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  // The server may not be listening yet (another node's kolorun still starting): retry
  // refused or failed attempts with a growing pause until connect_timeout.
  auto deadline = Clock::now() + connect_timeout_;
  auto pause = std::chrono::milliseconds(20);
  boost::system::error_code ec;
  while (true) {
    auto c = std::make_unique<Connection>();
    ec = connect_once(*c, address_, deadline);
    if (!ec) return c;
    if (Clock::now() + pause >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  return Status::IoError("store: cannot connect to " + address_.to_string() + " within " +
                         store_internal::format_ms(connect_timeout_) + ": " + ec.message() +
                         " (is kolorun's store server running at KOLO_STORE_ADDR?)");
}

void TcpStore::release(std::unique_ptr<Connection> c) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(c));
}

namespace {

// Sends one request and reads its reply within deadline.
Result<Response> roundtrip(TcpStore::Connection& c, const HostPort& addr, const Request& req,
                           Clock::time_point deadline) {
  std::string out = encode_request(req);
  unsigned char header[4];
  std::string body;
  boost::system::error_code ec;
  bool done = false;
  bool bad_length = false;
  c.io.restart();
  asio::async_write(c.socket, asio::buffer(out), [&](boost::system::error_code e, size_t) {
    if (e) {
      ec = e;
      done = true;
      return;
    }
    asio::async_read(c.socket, asio::buffer(header), [&](boost::system::error_code e2, size_t) {
      uint32_t n = e2 ? 0 : decode_length(header);
      if (e2 || n == 0 || n > kMaxFrameBytes) {
        ec = e2;
        bad_length = !e2;
        done = true;
        return;
      }
      body.resize(n);
      asio::async_read(c.socket, asio::buffer(body), [&](boost::system::error_code e3, size_t) {
        ec = e3;
        done = true;
      });
    });
  });
  c.io.run_until(deadline);
  std::string where = "store at " + addr.to_string();
  if (!done) {
    boost::system::error_code ignored;
    c.socket.close(ignored);
    c.io.restart();
    c.io.run();
    return Status::IoError(where + ": no reply to the request for key \"" + req.keys.front() +
                           "\" before the I/O deadline; the server may be stuck or gone");
  }
  if (ec) return Status::IoError(where + ": connection failed: " + ec.message());
  if (bad_length) return Status::IoError(where + ": reply frame has an invalid length");
  auto resp = decode_response(req.op, body);
  if (!resp) return Status::IoError(where + ": malformed reply frame");
  return std::move(*resp);
}

}  // namespace

// The deadline is the server-side wait (if any) plus io_timeout, so a slow network never turns
// a successful wait into an error.
Result<Response> TcpStore::call(const Request& req, std::chrono::milliseconds server_wait) {
  KOLO_ASSIGN_OR_RETURN(auto conn, acquire());
  KOLO_ASSIGN_OR_RETURN(Response resp,
                        roundtrip(*conn, address_, req, Clock::now() + server_wait + io_timeout_));
  release(std::move(conn));  // only a connection whose reply was read whole goes back
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
