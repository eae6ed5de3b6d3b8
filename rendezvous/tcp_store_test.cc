// TcpStore specifics: hostile frames against the server, the protocol decoder on bad bytes,
// and what a client sees when the server goes away.
#include "rendezvous/tcp_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "rendezvous/address.h"
#include "rendezvous/asio.h"
#include "rendezvous/tcp_store_protocol.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using asio::ip::tcp;

std::unique_ptr<TcpStoreServer> start_server() {
  auto s = TcpStoreServer::start("127.0.0.1", 0);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

// Sends raw bytes, then reads until the server closes the connection; returns what came back.
// The server closes a connection that sent a bad frame (or reached EOF), so this returns.
std::string send_raw_and_drain(int port, const std::string& bytes) {
  asio::io_context io;
  tcp::socket sock(io);
  sock.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  asio::write(sock, asio::buffer(bytes));
  sock.shutdown(tcp::socket::shutdown_send);  // EOF after the bytes: a hang-up mid-frame
  std::string got;
  boost::system::error_code ec;
  char buf[256];
  while (true) {
    size_t n = sock.read_some(asio::buffer(buf), ec);
    if (ec) break;
    got.append(buf, n);
  }
  return got;
}

std::string frame(const std::string& body) {
  uint32_t n = static_cast<uint32_t>(body.size());
  std::string out;
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((n >> s) & 0xff);
  return out + body;
}

TEST(TcpStoreServer, MalformedFramesCloseOnlyThatClient) {
  auto server = start_server();
  auto good = TcpStore::connect({"127.0.0.1", server->port()}, 5s).value();
  ASSERT_TRUE(good->set("before", "1").ok());

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"length beyond the bound", std::string("\xff\xff\xff\xff", 4)},
      {"zero length", std::string("\0\0\0\0", 4)},
      {"unknown op", frame(std::string("\x09", 1))},
      {"string length past the body", frame(std::string("\x05\x00\x00\x10\x00"
                                                        "abc",
                                                        8))},
      {"trailing bytes", frame(std::string("\x05\x00\x00\x00\x01"
                                           "kZZ",
                                           8))},
      {"wait with too many keys", frame(std::string("\x03\0\0\0\0\0\0\0\x01\xff\xff\xff\xff", 13))},
      {"truncated frame then hang-up", std::string("\x00\x00\x01\x00\x01\x02", 6)},
  };
  for (const auto& [what, bytes] : bad) {
    SCOPED_TRACE(what);
    EXPECT_EQ(send_raw_and_drain(server->port(), bytes), "");
  }
  // The server still serves the existing client and new ones.
  EXPECT_EQ(good->get("before", 1s).value(), "1");
  auto fresh = TcpStore::connect({"127.0.0.1", server->port()}, 5s).value();
  ASSERT_TRUE(fresh->set("after", "2").ok());
  EXPECT_EQ(good->get("after", 1s).value(), "2");
}

TEST(TcpStoreServer, WellFormedRequestWithBadKeyGetsAnErrorReplyNotAHangUp) {
  auto server = start_server();
  // check("") is well-formed on the wire but invalid: the reply is an error frame.
  std::string reply = send_raw_and_drain(server->port(), frame(std::string("\x05\0\0\0\0", 5)));
  ASSERT_GE(reply.size(), 6u);
  EXPECT_EQ(reply[4], static_cast<char>(tcp_store::Reply::kError));
  EXPECT_NE(reply.find("key must not be empty"), std::string::npos);
}

TEST(TcpStoreProtocol, RequestsRoundTripAndTruncationsAreRejected) {
  tcp_store::Request r{tcp_store::Op::kWait, {"a", "bb", ""}, {}, 0, 1234};
  std::string f = tcp_store::encode_request(r);
  std::string body = f.substr(4);
  auto back = tcp_store::decode_request(body);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->keys, r.keys);
  EXPECT_EQ(back->timeout_ms, 1234u);
  for (size_t cut = 0; cut < body.size(); ++cut)
    EXPECT_FALSE(tcp_store::decode_request(body.substr(0, cut)).has_value()) << cut;
}

TEST(TcpStore, ConnectToNothingFailsWithinTheTimeoutNamingTheAddress) {
  // Find a port nobody listens on: bind one, then close it.
  int port = start_server()->port();
  auto c = TcpStore::connect({"127.0.0.1", port}, 200ms);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kIoError);
  EXPECT_NE(c.status().message().find("cannot connect to 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << c.status().message();
}

TEST(TcpStore, ConnectWaitsForAServerThatStartsLate) {
  int port = start_server()->port();
  std::unique_ptr<TcpStoreServer> late;
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    auto s = TcpStoreServer::start("127.0.0.1", port);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    late = std::move(s).value();
  });
  auto c = TcpStore::connect({"127.0.0.1", port}, 10s);
  t.join();
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE((*c)->set("k", "v").ok());
}

TEST(TcpStore, ServerStopFailsAPendingWaitWithIoError) {
  auto server = start_server();
  auto c = TcpStore::connect({"127.0.0.1", server->port()}, 5s).value();
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    server->stop();
  });
  Status st = c->wait({"never"}, 30s);
  t.join();
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
}

TEST(TcpStoreServer, BindingAPortInUseIsAnIoErrorNamingIt) {
  auto first = start_server();
  auto second = TcpStoreServer::start("127.0.0.1", first->port());
  // SO_REUSEADDR does not allow two listeners on one port.
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kIoError);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(first->port())),
            std::string::npos);
}

TEST(HostPort, ParsesAndRejectsWithTheAcceptedForm) {
  auto a = parse_host_port("127.0.0.1:29500", "KOLO_STORE_ADDR");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 29500);
  auto b = parse_host_port("[::1]:7", "x");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->to_string(), "[::1]:7");
  for (const char* bad : {"", "host", ":80", "host:", "host:abc", "host:70000", "::1:80"}) {
    auto r = parse_host_port(bad, "KOLO_STORE_ADDR");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message().rfind(std::string("KOLO_STORE_ADDR=\"") + bad + "\"", 0), 0u)
        << r.status().message();
    EXPECT_NE(r.status().message().find("expected HOST:PORT"), std::string::npos);
  }
}

}  // namespace
}  // namespace kolo
