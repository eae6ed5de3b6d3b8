// TcpStore: the rendezvous store over TCP. kolorun (or rank 0 under mpirun) runs a
// TcpStoreServer; every worker talks to it through a TcpStore client.
//
// Note [TcpStore authentication]
// Every connection proves the job secret before any command, both ways, and then protects every
// frame; the secret itself never crosses the wire (common/mac.h is the MAC):
//   client -> server  hello:     "KSA1", nonce_c (16 bytes)
//   server -> client  challenge: nonce_s, MAC(K, "kolo-store server" | nonce_c | nonce_s)
//   client -> server  proof:     MAC(K, "kolo-store client" | nonce_c | nonce_s)
//   server -> client  verdict:   1 byte, 1 = accepted (0, then close: wrong secret)
// K is derived from the job secret. The client checks the server's tag too, so an impostor
// server cannot feed it addresses. Then each frame's body is followed by a 16-byte tag over its
// direction, its sequence number on the connection and the body, under a key derived from K and
// both nonces (tcp_store::FrameMac); a frame whose tag does not match closes the connection.
// A connection that has not authenticated within tcp_store::kAuthLimit is dropped, and so is
// the oldest of them when tcp_store::kMaxUnauthenticated are open, so idle sockets cannot
// crowd real clients out; its buffers have fixed sizes. docs/security.md has the threat model.
//
// Note [TcpStore wire format]
// After the handshake every message is a frame: a 4-byte big-endian length of what follows,
// the body, then the body's 16-byte tag. Integers are big-endian; a string is a u32 length
// followed by that many bytes.
//   request body:  u8 op, then
//     1 set:   str key, str value
//     2 get:   u64 timeout_ms, str key
//     3 wait:  u64 timeout_ms, u32 n, n x str key
//     4 add:   i64 delta, str key
//     5 check: str key
//   response body: u8 reply, then
//     0 ok:      get: str value; add: i64 new value; check: u8 0|1; set/wait: nothing
//     1 timeout: u32 n, n x str missing key   (get/wait only; the server ran the timeout)
//     2 error:   u8 kolo::StatusCode, str message   (e.g. an invalid key or counter)
// A connection carries one request at a time: the client sends a request and reads its reply.
// The server bounds every length before it reads (a frame is at most tcp_store::kMaxFrameBytes,
// a wait names at most kMaxWaitKeys keys) and grows a body's buffer with the bytes that have
// arrived, not with the announced length; a frame that breaks the format closes that connection
// only. Keys and values obey the limits in store.h.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mac.h"
#include "common/thread_annotations.h"
#include "kolo/status.h"
#include "rendezvous/address.h"
#include "rendezvous/store.h"

namespace kolo {

namespace tcp_store {
struct Request;
struct Response;
}  // namespace tcp_store

// Serves one key-value table to any number of clients from its own thread (Boost.Asio).
// Created by start(); the destructor (or stop()) closes every connection and joins the thread.
// host(), port() and address() are safe from any thread.
class TcpStoreServer {
 public:
  // Binds host:port (port 0 picks an ephemeral port; read it back with port()) and starts
  // serving the clients that prove `secret` (the job secret, non-empty: InvalidArgument
  // otherwise). IoError naming the address when the host does not resolve or the bind fails
  // (e.g. the port is in use).
  static Result<std::unique_ptr<TcpStoreServer>> start(const std::string& host, int port,
                                                       std::string_view secret);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // "host:port" as a client passes it to TcpStore::connect.
  std::string address() const { return HostPort{host_, port_}.to_string(); }

  // Stops serving: pending waits are dropped with their connections. Idempotent.
  void stop();

  struct Impl;  // the io_context, acceptor and table; touched only by the server thread

 private:
  TcpStoreServer() = default;
  std::string host_;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::once_flag stopped_;
};

// A Store backed by a TcpStoreServer. Thread-safe: each call borrows an idle connection from a
// small pool (opening a new one when all are busy), so a thread blocked in wait() never holds
// up another thread's set(). A call that loses its connection returns IoError; the next call
// opens a fresh one (no automatic retry of the failed call).
// Blocking calls: get/wait return Timeout when their timeout passes (the server measures it);
// should the server stop answering, the client gives up io_timeout after that.
class TcpStore : public Store {
 public:
  // Connects to address and authenticates with `secret` (the job secret, non-empty), retrying
  // refused connections until connect_timeout passes (the server may still be starting); each
  // later call that opens a connection retries as long. io_timeout: how long past its own wait
  // a call waits for a reply. No defaults: a job's bounds are KOLO_RENDEZVOUS_TIMEOUT's
  // (rendezvous_timeout() in world.h), kolorun's own client's are short (tools/kolorun/job.cc).
  // PeerFailure when the server and this process know different secrets (the message says
  // which side refused); IoError naming the address, connect_timeout and the last error
  // otherwise.
  static Result<std::unique_ptr<TcpStore>> connect(const HostPort& address, std::string_view secret,
                                                   std::chrono::milliseconds connect_timeout,
                                                   std::chrono::milliseconds io_timeout);
  ~TcpStore() override;

  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Result<bool> check(const std::string& key) override;

  const HostPort& address() const { return address_; }

  struct Connection;

 private:
  TcpStore(HostPort address, std::string_view secret, std::chrono::milliseconds connect_timeout,
           std::chrono::milliseconds io_timeout);
  Result<std::unique_ptr<Connection>> acquire();
  void release(std::unique_ptr<Connection> c);
  // One request on a pooled connection; an error reply becomes its Status.
  Result<tcp_store::Response> call(const tcp_store::Request& req,
                                   std::chrono::milliseconds server_wait);

  // Constant after construction.
  const HostPort address_;
  const AuthKey key_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds io_timeout_;

  Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ KOLO_GUARDED_BY(mu_);
};

}  // namespace kolo
