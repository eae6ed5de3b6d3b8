// Each accepted connection runs its handshake as a chain of asynchronous reads and writes on the
// bootstrap's io_context, so many run at once on one thread; the loop in accept_peers() runs
// until every higher rank is in.
#include "backends/tcp/accept_peers.h"

#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <list>

#include "backends/tcp/close_on_exec.h"
#include "backends/tcp/host_address.h"
#include "common/auth.h"
#include "common/logging.h"

namespace kolo::tcp {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

std::string endpoint_text(const tcp::endpoint& e) {
  asio::ip::address a = e.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  return join_host_port(a.to_string(), e.port());
}

std::string channel_binding(const std::string& store_prefix, const tcp::endpoint& connector,
                            const tcp::endpoint& acceptor) {
  return store_prefix + "|" + endpoint_text(connector) + "|" + endpoint_text(acceptor);
}

std::string secret_not_proven(const std::string& binding) {
  return "it does not know this job's secret (KOLO_SECRET differs; is it another job's "
         "process?), or a relay sits between the two ranks (this side saw the connection as " +
         binding + ")";
}

namespace {

class PeerAcceptor;

// One accepted connection's handshake (auth.h, acceptor side). finish() runs exactly once.
class Handshake : public std::enable_shared_from_this<Handshake> {
 public:
  Handshake(PeerAcceptor& owner, tcp::socket socket, tcp::endpoint remote);
  ~Handshake();
  void start();
  // Ends the handshake with `why` unless it has ended.
  void fail(Status why);

 private:
  void on_hello();
  void on_proof();
  void finish(Result<TcpPeer> result);
  std::string me() const;

  PeerAcceptor& owner_;
  std::unique_ptr<tcp::socket> socket_;
  const tcp::endpoint remote_;
  const std::string from_;
  asio::steady_timer timer_;
  std::string bound_;
  bool done_ = false;
  std::array<uint8_t, kHelloBytes> hello_bytes_{};
  std::array<uint8_t, kChallengeBytes> challenge_bytes_{};
  std::array<uint8_t, kProofBytes> proof_bytes_{};
  std::array<uint8_t, kVerdictBytes> verdict_bytes_{};
  Hello hello_;
  Challenge challenge_;
};

class PeerAcceptor {
  friend class Handshake;  // counts itself in live_

 public:
  PeerAcceptor(asio::io_context& io, tcp::acceptor& acceptor, const AcceptSpec& spec)
      : io_(io),
        acceptor_(acceptor),
        spec_(spec),
        pause_(io),
        connected_(static_cast<size_t>(spec.size), false),
        remaining_(spec.size - 1 - spec.rank) {}

  Result<std::vector<TcpPeer>> run() {
    if (remaining_ > 0) arm();
    while (remaining_ > 0 && Clock::now() < spec_.deadline) {
      if (io_.stopped()) io_.restart();
      io_.run_one_until(spec_.deadline);
    }
    // Stop accepting, end the handshakes still running, and drain their handlers so that
    // nothing refers to this object afterwards.
    error_code ignored;
    acceptor_.cancel(ignored);
    pause_.cancel();
    for (auto& h : std::list<std::shared_ptr<Handshake>>(pending_))
      h->fail(Status::Aborted("the bootstrap is over"));
    while (waiting_ > 0 || live_ > 0) {
      if (io_.stopped()) io_.restart();
      io_.run_one();
    }
    if (remaining_ > 0) return timeout();
    return std::move(peers_);
  }

  const AcceptSpec& spec() const { return spec_; }
  asio::io_context& io() { return io_; }
  bool connected(int rank) const { return connected_[static_cast<size_t>(rank)]; }
  std::string me() const { return "tcp: rank " + std::to_string(spec_.rank); }

  void finished(const std::shared_ptr<Handshake>& h, Result<TcpPeer> result) {
    pending_.remove(h);
    if (result.ok() && connected(result->rank))
      result = Status::PeerFailure(me() + ": rejected a second connection claiming rank " +
                                   std::to_string(result->rank));
    if (!result.ok()) {
      if (result.status().code() == StatusCode::kAborted) return;
      // A rejected connection is not fatal: the right peer may still come.
      KOLO_LOG_ERROR(result.status().message());
      rejected_.push_back(result.status().message());
      return;
    }
    connected_[static_cast<size_t>(result->rank)] = true;
    peers_.push_back(std::move(result.value()));
    --remaining_;
  }

 private:
  // waiting_ counts the accept and pause operations outstanding.
  void arm() {
    ++waiting_;
    acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
      --waiting_;
      if (ec == asio::error::operation_aborted || remaining_ == 0) return;
      if (ec) {
        // Out of file descriptors (EMFILE) or memory: accepting again at once would fail again
        // at once and spin; pause so that closing connections can free some.
        KOLO_LOG_ERROR(me() << ": accept failed (" << ec.message() << "); pausing");
        ++waiting_;
        pause_.expires_after(kAcceptPause);
        pause_.async_wait([this](const error_code& e) {
          --waiting_;
          if (!e && remaining_ > 0) arm();
        });
        return;
      }
      close_on_exec(socket);
      error_code e;
      const tcp::endpoint remote = socket.remote_endpoint(e);
      if (!e) {
        if (pending_.size() >= kMaxHandshakes)
          pending_.front()->fail(Status::PeerFailure(
              me() + ": dropped a connection that had not authenticated, to make room"));
        auto h = std::make_shared<Handshake>(*this, std::move(socket), remote);
        pending_.push_back(h);
        h->start();
      }
      arm();
    });
  }

  Status timeout() const {
    std::string missing;
    for (int r = spec_.rank + 1; r < spec_.size; ++r)
      if (!connected(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    std::string msg = me() + " timed out after " + std::to_string(spec_.connect_timeout.count()) +
                      " ms (connect_timeout) waiting for connections from ranks [" + missing + "]";
    if (!rejected_.empty())
      msg += "; rejected " + std::to_string(rejected_.size()) +
             " connection(s), last: " + rejected_.back();
    return Status::Timeout(msg);
  }

  asio::io_context& io_;
  tcp::acceptor& acceptor_;
  const AcceptSpec& spec_;
  asio::steady_timer pause_;
  std::vector<bool> connected_;
  int remaining_;
  int waiting_ = 0;
  int live_ = 0;  // Handshake objects alive: their handlers still refer to this object
  std::list<std::shared_ptr<Handshake>> pending_;  // oldest first
  std::vector<TcpPeer> peers_;
  std::vector<std::string> rejected_;
};

Handshake::Handshake(PeerAcceptor& owner, tcp::socket socket, tcp::endpoint remote)
    : owner_(owner),
      socket_(std::make_unique<tcp::socket>(std::move(socket))),
      remote_(remote),
      from_(endpoint_text(remote)),
      timer_(owner.io()) {
  ++owner_.live_;
}

Handshake::~Handshake() { --owner_.live_; }

std::string Handshake::me() const { return owner_.me(); }

void Handshake::start() {
  auto self = shared_from_this();
  error_code ec;
  const tcp::endpoint local = socket_->local_endpoint(ec);
  if (ec)
    return fail(
        Status::IoError(me() + ": an accepted connection has no endpoint: " + ec.message()));
  bound_ = channel_binding(owner_.spec().store_prefix, remote_, local);
  timer_.expires_at(std::min(owner_.spec().deadline, Clock::now() + kHandshakeLimit));
  timer_.async_wait([this, self](const error_code& e) {
    if (!e)
      fail(Status::Timeout(me() + ": the connection from " + from_ +
                           " did not authenticate in time"));
  });
  asio::async_read(*socket_, asio::buffer(hello_bytes_), [this, self](const error_code& e, size_t) {
    if (e)
      return fail(Status::PeerFailure(me() + " reading the hello of a connection from " + from_ +
                                      " failed: " + e.message()));
    on_hello();
  });
}

void Handshake::on_hello() {
  Result<Hello> hello = decode_hello(hello_bytes_);
  if (!hello.ok())
    return fail(hello.status().with_context(me() + ": rejected a connection from " + from_));
  hello_ = *hello;
  const AcceptSpec& spec = owner_.spec();
  const int peer = hello_.rank;
  if (hello_.size != spec.size || peer <= spec.rank || peer >= spec.size || owner_.connected(peer))
    return fail(Status::PeerFailure(
        me() + ": rejected a connection from " + from_ + " that claims rank " +
        std::to_string(peer) + " of " + std::to_string(hello_.size) +
        "; expected a not yet connected rank in (" + std::to_string(spec.rank) + ", " +
        std::to_string(spec.size) + ") of " + std::to_string(spec.size)));
  challenge_ = Challenge{spec.rank, spec.size, random_nonce(), {}};
  challenge_.tag = acceptor_tag(spec.key, bound_, hello_, challenge_);
  challenge_bytes_ = encode(challenge_);
  auto self = shared_from_this();
  asio::async_write(
      *socket_, asio::buffer(challenge_bytes_), [this, self](const error_code& e, size_t) {
        if (e)
          return fail(Status::PeerFailure(me() + " challenging rank " +
                                          std::to_string(hello_.rank) + " failed: " + e.message()));
        asio::async_read(*socket_, asio::buffer(proof_bytes_),
                         [this, self](const error_code& e2, size_t) {
                           if (e2)
                             return fail(Status::PeerFailure(me() + " reading the proof of rank " +
                                                             std::to_string(hello_.rank) +
                                                             " failed: " + e2.message()));
                           on_proof();
                         });
      });
}

void Handshake::on_proof() {
  const std::string name =
      "rank " + std::to_string(hello_.rank) + " (connecting from " + from_ + ")";
  Result<Proof> proof = decode_proof(proof_bytes_);
  if (!proof.ok()) return fail(proof.status().with_context(me() + ": proof of " + name));
  if (!proof->accept)
    return fail(Status::PeerFailure(me() + ": authentication with " + name +
                                    " failed: it rejected this rank's proof, so the two know "
                                    "different secrets (KOLO_SECRET differs; another job?) or a "
                                    "relay sits between them"));
  const bool ok =
      tags_equal(proof->tag, connector_tag(owner_.spec().key, bound_, hello_, challenge_));
  verdict_bytes_ = encode(Verdict{ok});
  auto self = shared_from_this();
  asio::async_write(
      *socket_, asio::buffer(verdict_bytes_), [this, self, ok, name](const error_code& e, size_t) {
        if (!ok)
          return fail(Status::PeerFailure(me() + ": authentication of " + name +
                                          " failed: " + secret_not_proven(bound_)));
        if (e)
          return fail(Status::PeerFailure(me() + " accepting " + name + " failed: " + e.message()));
        finish(TcpPeer{hello_.rank, from_, std::move(socket_),
                       session_key(owner_.spec().key, hello_, challenge_)});
      });
}

void Handshake::fail(Status why) {
  if (done_) return;
  error_code ignored;
  socket_->close(ignored);  // the pending read or write ends with operation_aborted
  finish(std::move(why));
}

void Handshake::finish(Result<TcpPeer> result) {
  if (done_) return;
  done_ = true;
  timer_.cancel();
  owner_.finished(shared_from_this(), std::move(result));
}

}  // namespace

Result<std::vector<TcpPeer>> accept_peers(asio::io_context& io, tcp::acceptor& acceptor,
                                          const AcceptSpec& spec) {
  return PeerAcceptor(io, acceptor, spec).run();
}

}  // namespace kolo::tcp
