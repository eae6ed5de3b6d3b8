// TcpStoreServer: one io_context on one thread owns the table, so no lock guards it. A session
// reads a request, answers it, and reads the next; a get/wait whose keys are missing parks the
// session in waiting_ until a set/add completes it or its timer fires.
#include <fcntl.h>

#include <list>
#include <map>
#include <set>

#include "rendezvous/asio.h"
#include "rendezvous/store_common.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_protocol.h"

namespace kolo {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace tcp_store;

namespace {
class Session;
}

struct TcpStoreServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::map<std::string, std::string> table;
  std::set<std::shared_ptr<Session>> sessions;  // every open connection
  std::set<std::shared_ptr<Session>> waiting;   // sessions parked in get/wait

  void accept();
  void on_change();
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(TcpStoreServer::Impl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(server.io) {}

  void start() { read_header(); }

  void close() {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    auto self = shared_from_this();
    server_.waiting.erase(self);
    server_.sessions.erase(self);
  }

  // Called after every change to the table while this session waits.
  void try_complete() {
    if (!pending_) return;
    std::vector<std::string> missing = missing_keys();
    if (!missing.empty()) return;
    finish_wait(false);
  }

 private:
  std::vector<std::string> missing_keys() const {
    std::vector<std::string> missing;
    for (const auto& k : pending_->keys)
      if (!server_.table.count(k)) missing.push_back(k);
    return missing;
  }

  void read_header() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_),
                     [this, self](boost::system::error_code ec, size_t) {
                       if (ec) return close();
                       uint32_t n = decode_length(header_);
                       // The bound is checked before allocating: a hostile length costs nothing.
                       if (n == 0 || n > kMaxFrameBytes) return close();
                       body_.resize(n);
                       read_body();
                     });
  }

  void read_body() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(body_),
                     [this, self](boost::system::error_code ec, size_t) {
                       if (ec) return close();
                       auto req = decode_request(body_);
                       body_.clear();
                       body_.shrink_to_fit();
                       if (!req) return close();
                       handle(std::move(*req));
                     });
  }

  static Response error(const Status& s) {
    Response r;
    r.reply = Reply::kError;
    r.error_code = static_cast<uint8_t>(s.code());
    r.error_message = s.message();
    return r;
  }

  void handle(Request req) {
    using namespace store_internal;
    for (const auto& k : req.keys) {
      Status s = validate_key("store", k);
      if (!s.ok()) return respond(req.op, error(s));
    }
    Response resp;
    switch (req.op) {
      case Op::kSet: {
        Status s = validate_value("store set", req.keys[0], req.value);
        if (!s.ok()) return respond(req.op, error(s));
        server_.table[req.keys[0]] = std::move(req.value);
        respond(req.op, resp);
        return server_.on_change();
      }
      case Op::kAdd: {
        int64_t current = 0;
        auto it = server_.table.find(req.keys[0]);
        if (it != server_.table.end()) {
          auto parsed = parse_counter(req.keys[0], it->second);
          if (!parsed.ok()) return respond(req.op, error(parsed.status()));
          current = *parsed;
        }
        auto next = checked_add(req.keys[0], current, req.delta);
        if (!next.ok()) return respond(req.op, error(next.status()));
        server_.table[req.keys[0]] = std::to_string(*next);
        resp.number = *next;
        respond(req.op, resp);
        return server_.on_change();
      }
      case Op::kCheck:
        resp.number = server_.table.count(req.keys[0]) ? 1 : 0;
        return respond(req.op, resp);
      case Op::kGet:
      case Op::kWait: {
        pending_ = std::move(req);
        if (missing_keys().empty()) return finish_wait(false);
        server_.waiting.insert(shared_from_this());
        auto self = shared_from_this();
        timer_.expires_after(
            std::chrono::milliseconds(std::min(pending_->timeout_ms, kMaxTimeoutMs)));
        timer_.async_wait([this, self](boost::system::error_code ec) {
          if (!ec && pending_) finish_wait(true);
        });
        return;
      }
    }
  }

  void finish_wait(bool timed_out) {
    Request req = std::move(*pending_);
    pending_.reset();
    timer_.cancel();
    server_.waiting.erase(shared_from_this());
    Response resp;
    if (timed_out) {
      resp.reply = Reply::kTimeout;
      resp.missing.clear();
      for (const auto& k : req.keys)
        if (!server_.table.count(k)) resp.missing.push_back(k);
    } else if (req.op == Op::kGet) {
      resp.value = server_.table.at(req.keys[0]);
    }
    respond(req.op, resp);
  }

  void respond(Op op, const Response& resp) {
    auto out = std::make_shared<std::string>(encode_response(op, resp));
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(*out),
                      [this, self, out](boost::system::error_code ec, size_t) {
                        if (ec) return close();
                        read_header();
                      });
  }

  TcpStoreServer::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  unsigned char header_[4] = {};
  std::string body_;
  std::optional<Request> pending_;
};

}  // namespace

void TcpStoreServer::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
      auto s = std::make_shared<Session>(*this, std::move(socket));
      sessions.insert(s);
      s->start();
    }
    accept();
  });
}

void TcpStoreServer::Impl::on_change() {
  // Copy first: completing a wait edits `waiting`.
  std::vector<std::shared_ptr<Session>> snapshot(waiting.begin(), waiting.end());
  for (auto& s : snapshot) s->try_complete();
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(const std::string& host, int port) {
  if (port < 0 || port > 65535)
    return Status::InvalidArgument("TcpStoreServer: port must be in 0..65535, got " +
                                   std::to_string(port));
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  std::string where = HostPort{host, port}.to_string();
  boost::system::error_code ec;
  tcp::resolver resolver(impl.io);
  auto endpoints = resolver.resolve(host, std::to_string(port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty())
    return Status::IoError("store server: cannot resolve host of " + where + ": " + ec.message());
  tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::IoError("store server: cannot listen on " + where + ": " + ec.message());
  // kolorun forks workers while it serves: they must not inherit the listening socket.
  ::fcntl(impl.acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  server->host_ = host;
  server->port_ = impl.acceptor.local_endpoint().port();
  impl.accept();
  server->thread_ = std::thread([&impl] { impl.io.run(); });
  return server;
}

void TcpStoreServer::stop() {
  std::call_once(stopped_, [this] {
    if (!impl_) return;
    asio::post(impl_->io, [impl = impl_.get()] {
      boost::system::error_code ignored;
      impl->acceptor.close(ignored);
      std::vector<std::shared_ptr<Session>> all(impl->sessions.begin(), impl->sessions.end());
      for (auto& s : all) s->close();
      impl->io.stop();
    });
    if (thread_.joinable()) thread_.join();
  });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

}  // namespace kolo
