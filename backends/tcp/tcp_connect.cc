#include "backends/tcp/tcp_connect.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/tcp/accept_peers.h"
#include "backends/tcp/close_on_exec.h"
#include "backends/tcp/host_address.h"
#include "backends/tcp/tcp_knobs.h"
#include "common/auth.h"
#include "common/logging.h"

namespace kolo::tcp {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

// How long one connect attempt may take before it is retried.
constexpr std::chrono::seconds kConnectAttemptLimit{3};

Status check_context(const BackendContext& c) {
  if (c.size < 1)
    return Status::InvalidArgument("tcp: context.size must be >= 1, got " + std::to_string(c.size));
  if (c.rank < 0 || c.rank >= c.size)
    return Status::InvalidArgument("tcp: context.rank must be in [0, " + std::to_string(c.size) +
                                   "), got " + std::to_string(c.rank));
  if (c.size > 1 && c.store == nullptr)
    return Status::InvalidArgument("tcp: context.store must not be null for a group of " +
                                   std::to_string(c.size) + " ranks");
  if (c.connect_timeout.count() <= 0)
    return Status::InvalidArgument("tcp: context.connect_timeout must be > 0 ms, got " +
                                   std::to_string(c.connect_timeout.count()));
  if (c.op_timeout.count() <= 0)
    return Status::InvalidArgument("tcp: context.op_timeout must be > 0 ms, got " +
                                   std::to_string(c.op_timeout.count()));
  return Status::Ok();
}

// The same-host offer, sent by the lower rank of a pair over the authenticated TCP connection:
// [0] 1 = offer, 0 = none; [1..37] abstract AF_UNIX socket name; [38..53] its MAC under the
// connection's session key. The answer is [0] 1 or 0 and its MAC. The connecting side then sends
// the token MAC(session, "token" | name) first on the AF_UNIX socket: the name is visible to
// every process on the host (/proc/net/unix), the token is never sent anywhere but there.
constexpr size_t kUnixNameBytes = 37;  // "kolo-" + 32 hex digits
constexpr size_t kOfferBytes = 1 + kUnixNameBytes + kTagBytes;
constexpr size_t kAnswerBytes = 1 + kTagBytes;
using Offer = std::array<uint8_t, kOfferBytes>;
using Answer = std::array<uint8_t, kAnswerBytes>;

// MAC(session, label | bytes): offers, answers and tokens of the same-host substitution.
Tag upgrade_tag(const AuthKey& session, std::string_view label, std::span<const uint8_t> bytes) {
  std::vector<uint8_t> m(label.begin(), label.end());
  m.insert(m.end(), bytes.begin(), bytes.end());
  return auth_tag(session, m);
}
// Seals the first N - kTagBytes bytes of `m` with a tag in its last kTagBytes, or checks them.
template <size_t N>
void seal(const AuthKey& session, std::string_view label, std::array<uint8_t, N>& m) {
  const Tag t = upgrade_tag(session, label, std::span<const uint8_t>(m.data(), N - kTagBytes));
  std::copy(t.begin(), t.end(), m.end() - kTagBytes);
}
template <size_t N>
bool sealed(const AuthKey& session, std::string_view label, const std::array<uint8_t, N>& m) {
  Tag got{};
  std::copy(m.end() - kTagBytes, m.end(), got.begin());
  return tags_equal(got,
                    upgrade_tag(session, label, std::span<const uint8_t>(m.data(), N - kTagBytes)));
}

// Connects one rank: owns the listening socket while the mesh is being built.
class Bootstrap {
 public:
  Bootstrap(const BackendContext& ctx, const ConnectOptions& options, asio::io_context& io)
      : ctx_(ctx),
        options_(options),
        io_(io),
        acceptor_(io),
        key_(derive_auth_key(ctx.secret)),
        deadline_(Clock::now() + ctx.connect_timeout) {}

  Result<std::vector<PeerSocket>> run() {
    KOLO_RETURN_IF_ERROR(listen());
    std::vector<TcpPeer> peers;
    // Lower ranks first: rank 0 only accepts, so the chain of waits always ends.
    for (int peer = 0; peer < ctx_.rank; ++peer) {
      KOLO_ASSIGN_OR_RETURN(TcpPeer p, connect_to(peer));
      peers.push_back(std::move(p));
    }
    AcceptSpec spec{ctx_.rank, ctx_.size, ctx_.store_prefix, key_, deadline_, ctx_.connect_timeout};
    KOLO_ASSIGN_OR_RETURN(std::vector<TcpPeer> accepted, accept_peers(io_, acceptor_, spec));
    for (TcpPeer& p : accepted) peers.push_back(std::move(p));
    error_code ignored;
    acceptor_.close(ignored);
    // Pairs settle the same-host substitution one at a time, each rank in increasing peer
    // order: the smallest unsettled pair is then always next on both of its ranks (no cycle).
    std::sort(peers.begin(), peers.end(),
              [](const TcpPeer& a, const TcpPeer& b) { return a.rank < b.rank; });
    std::vector<PeerSocket> links;
    for (TcpPeer& p : peers) {
      p.socket->set_option(tcp::no_delay(true), ignored);
      set_buffers(*p.socket);
      KOLO_ASSIGN_OR_RETURN(PeerSocket link, finish(std::move(p)));
      links.push_back(std::move(link));
    }
    return links;
  }

 private:
  std::string me() const { return "tcp: rank " + std::to_string(ctx_.rank); }
  std::string addr_key(int rank) const {
    return ctx_.store_prefix + "/tcp/addr/" + std::to_string(rank);
  }
  std::chrono::milliseconds remaining() const {
    return std::max(
        std::chrono::milliseconds(0),
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()));
  }

  template <typename Socket>
  void set_buffers(Socket& s) {
    // Large buffers let one message's worth of ring segments sit in flight; set before
    // connect/listen so that TCP negotiates a window scale that can use them.
    error_code ignored;
    const int bytes = static_cast<int>(options_.socket_buffer_bytes);
    s.set_option(asio::socket_base::send_buffer_size(bytes), ignored);
    s.set_option(asio::socket_base::receive_buffer_size(bytes), ignored);
  }

  // Runs the event loop until `done` or `deadline`; on the deadline calls cancel() and drains
  // the cancelled handler so that nothing refers to this frame's locals afterwards.
  template <typename Cancel>
  bool run_until(const bool& done, Clock::time_point deadline, Cancel cancel) {
    while (!done && Clock::now() < deadline) {
      if (io_.stopped()) io_.restart();
      io_.run_one_until(deadline);
    }
    if (done) return true;
    cancel();
    while (!done) {
      if (io_.stopped()) io_.restart();
      io_.run_one();
    }
    return false;
  }

  // Reads or writes exactly n bytes before `deadline`.
  template <typename Socket>
  Status transfer(Socket& s, bool write, void* buf, size_t n, Clock::time_point deadline,
                  const std::string& what) {
    bool done = false;
    error_code ec;
    auto handler = [&](const error_code& e, size_t) {
      ec = e;
      done = true;
    };
    if (write)
      asio::async_write(s, asio::buffer(buf, n), handler);
    else
      asio::async_read(s, asio::buffer(buf, n), handler);
    if (!run_until(done, deadline, [&] {
          error_code ignored;
          s.cancel(ignored);
        }))
      return Status::Timeout(what + " timed out");
    if (ec == asio::error::eof)
      return Status::PeerFailure(what + " failed: the peer closed the connection");
    if (ec) return Status::PeerFailure(what + " failed: " + ec.message());
    return Status::Ok();
  }
  template <size_t N, typename Socket>
  Status send(Socket& s, std::array<uint8_t, N> bytes, Clock::time_point deadline,
              const std::string& what) {
    return transfer(s, true, bytes.data(), N, deadline, what);
  }

  Status listen() {
    if (ctx_.size == 1) return Status::Ok();
    host_ = publish_host(options_.host, ctx_.local_size, ctx_.size);
    error_code ec;
    const asio::ip::address literal = asio::ip::make_address(host_, ec);
    asio::ip::address bind_address = asio::ip::address_v4::any();
    if (!ec && literal.is_loopback())
      bind_address = literal;  // a loopback-only job should not listen on every interface
    else if (!ec && literal.is_v6())
      bind_address = asio::ip::address_v6::any();
    const tcp::endpoint endpoint(bind_address, 0);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) close_on_exec(acceptor_);
    if (!ec) set_buffers(acceptor_);  // accepted sockets inherit the buffer sizes
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return Status::IoError(me() + " cannot listen on " + bind_address.to_string() + ": " +
                             ec.message());
    const std::string published = join_host_port(host_, acceptor_.local_endpoint().port());
    KOLO_LOG_DEBUG(me() << " listening; publishing " << published << " as " << addr_key(ctx_.rank));
    return ctx_.store->set(addr_key(ctx_.rank), published)
        .with_context(me() + ": publishing the address in the store");
  }

  Result<TcpPeer> connect_to(int peer) {
    const std::string who = "rank " + std::to_string(peer);
    Result<std::string> address = ctx_.store->get(addr_key(peer), remaining());
    if (!address.ok())
      return address.status().with_context(me() + " waiting for the address of " + who);
    KOLO_ASSIGN_OR_RETURN(HostPortText hp, split_host_port(*address, addr_key(peer)));
    const std::string name = who + " (" + *address + ")";
    KOLO_ASSIGN_OR_RETURN(std::unique_ptr<tcp::socket> socket, connect_socket(hp, name));
    KOLO_ASSIGN_OR_RETURN(AuthKey session,
                          authenticate_as_connector(*socket, peer, *address, name));
    return TcpPeer{peer, *address, std::move(socket), session};
  }

  // A TCP connection to `hp`, retried until the deadline: the peer may not listen yet (its
  // address can be a stale one from a restart).
  Result<std::unique_ptr<tcp::socket>> connect_socket(const HostPortText& hp,
                                                      const std::string& name) {
    auto socket = std::make_unique<tcp::socket>(io_);
    std::string last_error = "no attempt finished";
    auto pause = std::chrono::milliseconds(10);
    while (Clock::now() < deadline_) {
      error_code ec;
      tcp::resolver resolver(io_);
      auto endpoints = resolver.resolve(hp.host, std::to_string(hp.port), ec);
      if (!ec) {
        socket = std::make_unique<tcp::socket>(io_);
        socket->open(endpoints.begin()->endpoint().protocol(), ec);
        if (!ec) close_on_exec(*socket);
        if (!ec) set_buffers(*socket);
      }
      if (!ec) {
        bool done = false;
        asio::async_connect(*socket, endpoints, [&](const error_code& e, const tcp::endpoint&) {
          ec = e;
          done = true;
        });
        if (!run_until(done, std::min(deadline_, Clock::now() + kConnectAttemptLimit), [&] {
              error_code ignored;
              socket->close(ignored);
            }))
          ec = asio::error::timed_out;
      }
      if (!ec) return socket;
      last_error = ec.message();
      std::this_thread::sleep_for(std::min(pause, remaining()));
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
    return Status::Timeout(me() + " could not connect to " + name + " within " +
                           std::to_string(ctx_.connect_timeout.count()) +
                           " ms (connect_timeout); last error: " + last_error);
  }

  // The handshake as the connector (auth.h) with `peer`, published at `address`: hello, the
  // acceptor's challenge, this rank's proof, the verdict. Returns the connection's session key.
  Result<AuthKey> authenticate_as_connector(tcp::socket& socket, int peer,
                                            const std::string& address, const std::string& name) {
    error_code e1, e2;
    const std::string bound =
        channel_binding(ctx_.store_prefix, socket.local_endpoint(e1), socket.remote_endpoint(e2));
    if (e1 || e2)
      return Status::IoError(me() + ": the connection to " + name +
                             " has no endpoints: " + (e1 ? e1 : e2).message());
    Hello hello{ctx_.rank, ctx_.size, random_nonce()};
    KOLO_RETURN_IF_ERROR(
        send(socket, encode(hello), deadline_, me() + " sending hello to " + name));
    std::array<uint8_t, kChallengeBytes> cbytes{};
    KOLO_RETURN_IF_ERROR(transfer(socket, false, cbytes.data(), cbytes.size(), deadline_,
                                  me() + " reading the challenge of " + name));
    Result<Challenge> challenge = decode_challenge(cbytes);
    if (!challenge.ok())
      return Status::PeerFailure(me() + ": " + name +
                                 " answered with a bad challenge: " + challenge.status().message());
    if (challenge->rank != peer || challenge->size != ctx_.size)
      return Status::PeerFailure(
          me() + ": the process at " + address + " is rank " + std::to_string(challenge->rank) +
          " of " + std::to_string(challenge->size) + ", expected rank " + std::to_string(peer) +
          " of " + std::to_string(ctx_.size) + " (a stale address from another job?)");
    if (!tags_equal(challenge->tag, acceptor_tag(key_, bound, hello, *challenge))) {
      (void)send(socket, encode(Proof{false, {}}), deadline_, "rejecting");
      return Status::PeerFailure(me() + ": authentication of " + name +
                                 " failed: " + secret_not_proven(bound));
    }
    KOLO_RETURN_IF_ERROR(send(socket,
                              encode(Proof{true, connector_tag(key_, bound, hello, *challenge)}),
                              deadline_, me() + " sending its proof to " + name));
    std::array<uint8_t, kVerdictBytes> vbytes{};
    KOLO_RETURN_IF_ERROR(transfer(socket, false, vbytes.data(), vbytes.size(), deadline_,
                                  me() + " reading the verdict of " + name));
    Result<Verdict> verdict = decode_verdict(vbytes);
    if (!verdict.ok()) return verdict.status().with_context(me() + ": verdict of " + name);
    if (!verdict->accept)
      return Status::PeerFailure(me() + ": " + name +
                                 " rejected this rank's proof of the job secret (KOLO_SECRET "
                                 "differs between the ranks, or a relay sits between them)");
    return session_key(key_, hello, *challenge);
  }

  // Same-host substitution. Both ends of a connection whose local and remote addresses are equal
  // run on one host; there an AF_UNIX stream socket carries the same bytes without the TCP/IP
  // stack (measured ~2.5x loopback TCP's bandwidth on the 2-core development VM). The lower
  // rank (which accepted the TCP connection) offers an abstract socket name and a token; the
  // higher rank connects, answers 1 (switching) or 0 (staying on TCP) over TCP, and sends the
  // token first on the new socket; the lower rank accepts until a connection presents it.
  // Either side falls back to TCP when it cannot or may not switch (KOLO_TCP_UNIX=0), so a
  // mismatched setting only costs speed.
  Result<PeerSocket> finish(TcpPeer p) {
    error_code e1, e2;
    const auto local = p.socket->local_endpoint(e1);
    const auto remote = p.socket->remote_endpoint(e2);
    const bool same_host =
        options_.same_host_unix && !e1 && !e2 && local.address() == remote.address();
    const Link link{p, "rank " + std::to_string(p.rank) + " (" + p.address + ")",
                    std::min(deadline_, Clock::now() + kHandshakeLimit)};
    KOLO_ASSIGN_OR_RETURN(std::unique_ptr<unix_socket> u, ctx_.rank < p.rank
                                                              ? offer_unix(link, same_host)
                                                              : answer_unix_offer(link, same_host));
    if (!u)
      return PeerSocket{p.rank, p.address, std::make_unique<StreamSocket>(std::move(*p.socket)),
                        p.session};
    set_buffers(*u);
    return PeerSocket{p.rank, p.address + " via AF_UNIX",
                      std::make_unique<StreamSocket>(std::move(*u)), p.session};
  }

  using unix_socket = asio::local::stream_protocol::socket;

  // One pair's same-host substitution in progress: its TCP link, how messages name the peer,
  // and the deadline of the whole exchange.
  struct Link {
    TcpPeer& tcp;
    std::string name;
    Clock::time_point limit;
  };

  // The lower rank's side: offers an abstract socket (when the ranks share the host) and, if
  // the peer takes it, waits for its connection. Null: the pair stays on TCP.
  Result<std::unique_ptr<unix_socket>> offer_unix(const Link& l, bool same_host) {
    Offer offer{};
    asio::local::stream_protocol::acceptor listener(io_);
    if (same_host) {
      const std::string path = unix_name();
      error_code ec;
      const asio::local::stream_protocol::endpoint ep(std::string(1, '\0') + path);
      listener.open(ep.protocol(), ec);
      if (!ec) close_on_exec(listener);
      if (!ec) listener.bind(ep, ec);
      if (!ec) listener.listen(asio::socket_base::max_listen_connections, ec);
      if (!ec) {
        offer[0] = 1;
        std::memcpy(offer.data() + 1, path.data(), kUnixNameBytes);
      }
    }
    seal(l.tcp.session, "offer", offer);
    KOLO_RETURN_IF_ERROR(
        send(*l.tcp.socket, offer, l.limit, me() + " sending the same-host offer to " + l.name));
    if (offer[0] == 0) return std::unique_ptr<unix_socket>();
    Answer answer{};
    KOLO_RETURN_IF_ERROR(transfer(*l.tcp.socket, false, answer.data(), answer.size(), l.limit,
                                  me() + " reading the same-host answer of " + l.name));
    if (!sealed(l.tcp.session, "answer", answer))
      return Status::PeerFailure(me() + ": the same-host answer of " + l.name +
                                 " failed its MAC (altered on the way?)");
    if (answer[0] == 0) return std::unique_ptr<unix_socket>();
    const Nonce token = upgrade_tag(l.tcp.session, "token",
                                    std::span<const uint8_t>(offer.data() + 1, kUnixNameBytes));
    return accept_unix(l, listener, token);
  }

  // Accepts on `listener` until a connection presents `token`: the name is visible to every
  // process on the host, so someone else may connect first.
  Result<std::unique_ptr<unix_socket>> accept_unix(const Link& l,
                                                   asio::local::stream_protocol::acceptor& listener,
                                                   const Nonce& token) {
    while (true) {
      auto u = std::make_unique<unix_socket>(io_);
      bool done = false;
      error_code ec;
      listener.async_accept(*u, [&](const error_code& e) {
        ec = e;
        done = true;
      });
      if (!run_until(done, l.limit, [&] {
            error_code ignored;
            listener.cancel(ignored);
          }))
        return Status::Timeout(me() + " timed out accepting the same-host socket of " + l.name);
      if (ec)
        return Status::IoError(me() + ": accepting the same-host socket of " + l.name +
                               " failed: " + ec.message());
      close_on_exec(*u);
      // The peer sends its token right after connecting; a silent intruder only gets a short
      // while before the next connection is taken.
      Nonce got{};
      const Clock::time_point token_limit =
          std::min(l.limit, Clock::now() + std::chrono::seconds(2));
      Status st = transfer(*u, false, got.data(), got.size(), token_limit,
                           me() + " reading the same-host token of " + l.name);
      if (st.ok() && tags_equal(got, token)) return u;
      KOLO_LOG_ERROR(me() << ": dropped a same-host connection that did not present the token of "
                          << l.name);
      if (Clock::now() >= l.limit)
        return Status::Timeout(me() + " timed out waiting for the same-host socket of " + l.name);
    }
  }

  // The higher rank's side: reads the offer, connects to the offered socket when the ranks share
  // the host and it may, answers, and sends the token on the new socket. Null: stays on TCP.
  Result<std::unique_ptr<unix_socket>> answer_unix_offer(const Link& l, bool same_host) {
    Offer offer{};
    KOLO_RETURN_IF_ERROR(transfer(*l.tcp.socket, false, offer.data(), offer.size(), l.limit,
                                  me() + " reading the same-host offer of " + l.name));
    if (!sealed(l.tcp.session, "offer", offer))
      return Status::PeerFailure(me() + ": the same-host offer of " + l.name +
                                 " failed its MAC (altered on the way?)");
    if (offer[0] == 0) return std::unique_ptr<unix_socket>();  // the offerer expects no answer
    Answer answer{};
    auto u = std::make_unique<unix_socket>(io_);
    if (same_host) {
      const std::string path(reinterpret_cast<const char*>(offer.data() + 1), kUnixNameBytes);
      error_code ec;
      const asio::local::stream_protocol::endpoint ep(std::string(1, '\0') + path);
      u->open(ep.protocol(), ec);
      if (!ec) close_on_exec(*u);
      // A connect to a listening AF_UNIX socket completes at once (the backlog takes it).
      if (!ec) u->connect(ep, ec);
      if (!ec) answer[0] = 1;
    }
    seal(l.tcp.session, "answer", answer);
    KOLO_RETURN_IF_ERROR(
        send(*l.tcp.socket, answer, l.limit, me() + " answering the same-host offer of " + l.name));
    if (answer[0] == 0) return std::unique_ptr<unix_socket>();
    const Nonce token = upgrade_tag(l.tcp.session, "token",
                                    std::span<const uint8_t>(offer.data() + 1, kUnixNameBytes));
    KOLO_RETURN_IF_ERROR(
        send(*u, token, l.limit, me() + " sending the same-host token to " + l.name));
    return u;
  }

  // "kolo-" and 32 random hex digits: unique on the host with overwhelming probability.
  static std::string unix_name() {
    static const char* const kHex = "0123456789abcdef";
    std::string name = "kolo-";
    for (uint8_t b : random_nonce()) {
      name += kHex[b >> 4];
      name += kHex[b & 15];
    }
    return name;
  }

  const BackendContext& ctx_;
  const ConnectOptions options_;
  asio::io_context& io_;
  tcp::acceptor acceptor_;
  const AuthKey key_;
  const Clock::time_point deadline_;
  std::string host_;
};

}  // namespace

ConnectOptions connect_options(const KnobSet& knobs) {
  ConnectOptions o;
  o.host = knobs.text(tcp_knobs::kHost);
  o.socket_buffer_bytes = knobs.size(tcp_knobs::kSocketBuffer);
  o.max_frame_bytes = knobs.size(tcp_knobs::kMaxFrame);
  // Rounded up, so that a spin below 1 us (e.g. "500ns") still spins rather than turning off.
  o.spin = std::chrono::ceil<std::chrono::microseconds>(knobs.duration(tcp_knobs::kSpin));
  o.same_host_unix = knobs.boolean(tcp_knobs::kUnix);
  o.integrity = knobs.boolean(tcp_knobs::kIntegrity);
  return o;
}

Result<std::unique_ptr<TcpChannel>> connect_channel(const BackendContext& context,
                                                    const ConnectOptions& options) {
  KOLO_RETURN_IF_ERROR(check_context(context));
  if (options.max_frame_bytes == 0)
    return Status::InvalidArgument(
        "tcp: options.max_frame_bytes must be > 0, got 0 (connect_options() reads "
        "KOLO_TCP_MAX_FRAME)");
  auto io = std::make_unique<asio::io_context>(1);  // one thread drives it: no locking
  std::vector<PeerSocket> peers;
  {
    Bootstrap bootstrap(context, options, *io);
    KOLO_ASSIGN_OR_RETURN(peers, bootstrap.run());
  }
  TcpChannelOptions channel_options;
  channel_options.op_timeout = context.op_timeout;
  channel_options.op_timeout_knob = context.op_timeout_knob;
  channel_options.max_frame_bytes = options.max_frame_bytes;
  channel_options.spin = options.spin;
  channel_options.integrity = options.integrity;
  return std::make_unique<TcpChannel>(context.rank, context.size, std::move(io), std::move(peers),
                                      channel_options);
}

}  // namespace kolo::tcp
