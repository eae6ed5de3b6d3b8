// TcpStoreServer: one io_context on one thread owns the table, so no lock guards it. A session
// first authenticates (Note [TcpStore authentication]), then reads a request, answers it, and
// reads the next; a get/wait whose keys are missing parks the session in `waiting` until a
// set/add completes it or its timer fires.
// A handler can run after its session was closed with a success code (Asio completes a read at
// once when the bytes are there, and queues the handler; an eviction may run first), so the
// handshake's handlers check closed_, not only the error code.
#include <fcntl.h>

#include <algorithm>
#include <array>
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
  explicit Impl(std::string_view secret) : key(derive_auth_key(secret)) {}
  const AuthKey key;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_pause{io};
  std::map<std::string, std::string> table;
  std::set<std::shared_ptr<Session>> sessions;          // every open connection
  std::set<std::shared_ptr<Session>> waiting;           // sessions parked in get/wait
  std::list<std::shared_ptr<Session>> unauthenticated;  // oldest first

  void accept();
  void on_change();
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(TcpStoreServer::Impl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(server.io) {}

  // Authenticates, then serves. The oldest unauthenticated connection makes room when there
  // are kMaxUnauthenticated: real clients authenticate within a round trip, so idle sockets
  // opened by someone else cannot keep them out.
  void start() {
    auto self = shared_from_this();
    if (server_.unauthenticated.size() >= kMaxUnauthenticated)
      server_.unauthenticated.front()->close();
    in_line_ = server_.unauthenticated.insert(server_.unauthenticated.end(), self);
    timer_.expires_after(kAuthLimit);
    timer_.async_wait([this, self](boost::system::error_code ec) {
      if (!ec && !mac_) close();
    });
    read_hello();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    auto self = shared_from_this();
    if (!mac_) server_.unauthenticated.erase(in_line_);
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

  // The handshake's buffers have fixed sizes: an unauthenticated peer costs ~100 bytes.
  void read_hello() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(hello_),
                     [this, self](boost::system::error_code ec, size_t) {
                       if (ec || closed_) return close();
                       auto client = decode_hello(hello_);
                       if (!client) return close();
                       client_nonce_ = *client;
                       server_nonce_ = random_nonce();
                       const Tag tag = server_tag(server_.key, client_nonce_, server_nonce_);
                       std::copy(server_nonce_.begin(), server_nonce_.end(), challenge_.begin());
                       std::copy(tag.begin(), tag.end(), challenge_.begin() + kNonceBytes);
                       asio::async_write(socket_, asio::buffer(challenge_),
                                         [this, self](boost::system::error_code ec, size_t) {
                                           if (ec || closed_) return close();
                                           read_proof();
                                         });
                     });
  }

  void read_proof() {
    auto self = shared_from_this();
    asio::async_read(
        socket_, asio::buffer(proof_), [this, self](boost::system::error_code ec, size_t) {
          // Closed meanwhile (evicted, or the authentication limit): in_line_ is erased already.
          if (ec || closed_) return close();
          const bool ok = tags_equal(proof_, client_tag(server_.key, client_nonce_, server_nonce_));
          verdict_[0] = ok ? 1 : 0;
          if (ok) {
            mac_.emplace(server_.key, client_nonce_, server_nonce_, /*server_side=*/true);
            server_.unauthenticated.erase(in_line_);
            timer_.cancel();
          }
          asio::async_write(socket_, asio::buffer(verdict_),
                            [this, self, ok](boost::system::error_code ec, size_t) {
                              if (ec || !ok || closed_) return close();
                              read_header();
                            });
        });
  }

  void read_header() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_),
                     [this, self](boost::system::error_code ec, size_t) {
                       if (ec) return close();
                       want_ = decode_length(header_);
                       if (want_ <= kTagBytes || want_ > kMaxFrameBytes) return close();
                       read_body();
                     });
  }

  // The body grows with what has arrived (at most doubling per read), never to the announced
  // length at once: a peer that announces 64 MiB and stops costs what it sent.
  void read_body() {
    const size_t have = body_.size();
    const size_t step = std::min<size_t>(want_ - have, std::max<size_t>(have, 4096));
    body_.resize(have + step);
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(body_.data() + have, step),
                     [this, self](boost::system::error_code ec, size_t) {
                       if (ec) return close();
                       if (body_.size() < want_) return read_body();
                       std::optional<Request> req;
                       if (mac_->open(body_)) req = decode_request(body_);
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
    auto out = std::make_shared<std::string>(mac_->seal(encode_response(op, resp)));
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(*out),
                      [this, self, out](boost::system::error_code ec, size_t) {
                        if (ec) return close();
                        read_header();
                      });
  }

  TcpStoreServer::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;  // the authentication limit, then the timeout of a get/wait
  bool closed_ = false;
  std::list<std::shared_ptr<Session>>::iterator in_line_;  // in unauthenticated until mac_
  std::array<uint8_t, kHelloBytes> hello_{};
  std::array<uint8_t, kChallengeBytes> challenge_{};
  Tag proof_{};
  std::array<uint8_t, kVerdictBytes> verdict_{};
  Nonce client_nonce_{};
  Nonce server_nonce_{};
  std::optional<FrameMac> mac_;  // set once the peer has proven the secret
  unsigned char header_[4] = {};
  uint32_t want_ = 0;
  std::string body_;
  std::optional<Request> pending_;
};

}  // namespace

void TcpStoreServer::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors (EMFILE, ENFILE) or memory: accepting again at once would fail
      // again at once and spin this thread; pause so that closing connections can free some.
      accept_pause.expires_after(kAcceptPause);
      accept_pause.async_wait([this](boost::system::error_code e) {
        if (!e && acceptor.is_open()) accept();
      });
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    auto s = std::make_shared<Session>(*this, std::move(socket));
    sessions.insert(s);
    s->start();
    accept();
  });
}

void TcpStoreServer::Impl::on_change() {
  // Copy first: completing a wait edits `waiting`.
  std::vector<std::shared_ptr<Session>> snapshot(waiting.begin(), waiting.end());
  for (auto& s : snapshot) s->try_complete();
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(const std::string& host, int port,
                                                              std::string_view secret) {
  if (port < 0 || port > 65535)
    return Status::InvalidArgument("TcpStoreServer: port must be in 0..65535, got " +
                                   std::to_string(port));
  if (secret.empty())
    return Status::InvalidArgument("TcpStoreServer: the job secret must not be empty");
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer());
  server->impl_ = std::make_unique<Impl>(secret);
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
      impl->accept_pause.cancel();
      std::vector<std::shared_ptr<Session>> all(impl->sessions.begin(), impl->sessions.end());
      for (auto& s : all) s->close();
      impl->io.stop();
    });
    if (thread_.joinable()) thread_.join();
  });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

}  // namespace kolo
