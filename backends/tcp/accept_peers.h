// The acceptor side of the tcp bootstrap: takes the connections of the higher ranks and
// authenticates them (auth.h), all handshakes at once, so that idle or slow connections (a port
// scanner, a slowloris) cannot hold up the real peers.
//
// Bounds: a connection has kHandshakeLimit to authenticate; at most kMaxHandshakes are in
// flight, the oldest dropped for a new one; each costs fixed ~100-byte buffers; when accept
// fails (out of file descriptors) the acceptor pauses kAcceptPause instead of retrying at once.
// A connection that fails only costs itself: the right peer may still come.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/mac.h"
#include "kolo/status.h"

namespace kolo::tcp {

inline constexpr std::chrono::seconds kHandshakeLimit{10};
inline constexpr size_t kMaxHandshakes = 64;
inline constexpr std::chrono::milliseconds kAcceptPause{100};

// A connected, authenticated TCP link before the same-host substitution (tcp_connect.cc).
struct TcpPeer {
  int rank = -1;
  std::string address;
  std::unique_ptr<boost::asio::ip::tcp::socket> socket;
  AuthKey session;  // auth.h's session_key() of this connection
};

struct AcceptSpec {
  int rank = 0;  // this rank: peers are the ranks in (rank, size)
  int size = 1;
  std::string store_prefix;  // part of the channel binding (auth.h)
  AuthKey key;               // derived from the job secret
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds connect_timeout{0};  // named in the Timeout error
};

// "a.b.c.d:port" of an endpoint, an IPv4 address mapped into IPv6 written as IPv4, so that both
// ends of a connection write the same text for it.
std::string endpoint_text(const boost::asio::ip::tcp::endpoint& e);
// auth.h's channel binding: the job and plane, then the connector's and the acceptor's
// endpoints as this side's socket reports them.
std::string channel_binding(const std::string& store_prefix,
                            const boost::asio::ip::tcp::endpoint& connector,
                            const boost::asio::ip::tcp::endpoint& acceptor);
// Why a peer's tag did not verify, for the errors of both sides.
std::string secret_not_proven(const std::string& binding);

// Runs `io` (on the calling thread) until every rank in (spec.rank, spec.size) has connected
// through `acceptor` and authenticated, or spec.deadline passes: then Timeout naming the ranks
// that never did and the last rejected connection. The peers come in no particular order.
Result<std::vector<TcpPeer>> accept_peers(boost::asio::io_context& io,
                                          boost::asio::ip::tcp::acceptor& acceptor,
                                          const AcceptSpec& spec);

}  // namespace kolo::tcp
