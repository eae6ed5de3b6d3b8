// TcpChannel over real loopback sockets, with ranks as threads and an in-memory store.
#include "backends/tcp/tcp_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/write.hpp>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "backends/tcp/host_address.h"
#include "backends/tcp/tcp_backend.h"
#include "backends/tcp/tcp_connect.h"
#include "common/auth.h"
#include "rendezvous/memory_store.h"

namespace kolo::tcp {
namespace {

using std::chrono::milliseconds;

BackendContext context(Store& store, int rank, int size, std::string secret = "s3cret") {
  BackendContext c;
  c.knobs = &KnobSet::defaults();
  c.rank = rank;
  c.size = size;
  c.local_size = size;
  c.store = &store;
  c.store_prefix = "test";
  c.secret = std::move(secret);
  c.connect_timeout = milliseconds(10000);
  c.op_timeout = milliseconds(10000);
  return c;
}

// The options of a job that sets no KOLO_TCP_* knob.
ConnectOptions default_options() { return connect_options(KnobSet::defaults()); }

// Connects `size` ranks as threads; secrets[r] (default: all equal) is rank r's secret.
std::vector<Result<std::unique_ptr<TcpChannel>>> connect_group(
    Store& store, int size, std::vector<std::string> secrets = {},
    ConnectOptions options = default_options(),
    milliseconds connect_timeout = milliseconds(10000)) {
  std::vector<Result<std::unique_ptr<TcpChannel>>> out;
  for (int r = 0; r < size; ++r) out.emplace_back(Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      BackendContext c = context(store, r, size, secrets.empty() ? "s3cret" : secrets[r]);
      c.connect_timeout = connect_timeout;
      out[r] = connect_channel(c, options);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// The address `rank` publishes once it listens (under context()'s store prefix).
Result<HostPortText> published_address(Store& store, int rank) {
  KOLO_ASSIGN_OR_RETURN(std::string addr,
                        store.get("test/tcp/addr/" + std::to_string(rank), milliseconds(5000)));
  return split_host_port(addr, "addr");
}

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

TEST(TcpChannelTest, SendsZeroOneAndLargeMessagesBothWays) {
  MemoryStore store;
  auto ch = connect_group(store, 2);
  ASSERT_TRUE(ch[0].ok()) << ch[0].status().to_string();
  ASSERT_TRUE(ch[1].ok()) << ch[1].status().to_string();
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{9} << 20}) {
    std::thread other([&] {
      auto in = std::vector<uint8_t>(n, 0);
      const auto out = pattern(n, 1);
      EXPECT_TRUE((*ch[1])->sendrecv(0, out.data(), n, 0, in.data(), n).ok());
      EXPECT_EQ(in, pattern(n, 0));
    });
    std::vector<uint8_t> in(n, 0);
    const auto out = pattern(n, 0);
    Status s = (*ch[0])->sendrecv(1, out.data(), n, 1, in.data(), n);
    other.join();
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(in, pattern(n, 1)) << n << " bytes";
  }
}

TEST(TcpChannelTest, KeepsOrderAndSplitsMessagesIntoBoundedFrames) {
  MemoryStore store;
  ConnectOptions options = default_options();
  options.max_frame_bytes = 1000;  // forces multi-frame messages
  auto ch = connect_group(store, 3, {}, options);
  for (auto& c : ch) ASSERT_TRUE(c.ok()) << c.status().to_string();
  const auto a = pattern(2500, 7), b = pattern(1000, 8), c0 = pattern(0, 0), d = pattern(3, 9);
  std::thread sender([&] {
    TcpChannel& s = **ch[2];
    std::vector<ops::Request> reqs = {s.isend(0, a.data(), a.size()),
                                      s.isend(0, b.data(), b.size()), s.isend(0, c0.data(), 0),
                                      s.isend(0, d.data(), d.size())};
    for (auto& r : reqs) EXPECT_TRUE(s.wait(r).ok());
  });
  TcpChannel& r = **ch[0];
  std::vector<uint8_t> ra(2500), rb(1000), rd(3);
  ops::Request r1 = r.irecv(2, ra.data(), ra.size());
  ops::Request r2 = r.irecv(2, rb.data(), rb.size());
  ops::Request r3 = r.irecv(2, nullptr, 0);
  ops::Request r4 = r.irecv(2, rd.data(), rd.size());
  EXPECT_TRUE(r.wait(r4).ok());  // waiting for the last drives the earlier ones too
  EXPECT_TRUE(r1.done() && r2.done() && r3.done());
  EXPECT_TRUE(r.wait(r1).ok());
  sender.join();
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
  EXPECT_EQ(rd, d);
}

TEST(TcpChannelTest, BadArgumentsFailWithoutTouchingTheLink) {
  MemoryStore store;
  auto ch = connect_group(store, 2);
  ASSERT_TRUE(ch[0].ok());
  TcpChannel& c = **ch[0];
  uint8_t byte = 0;
  Status s = c.wait(c.isend(0, &byte, 1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("got 0"), std::string::npos) << s.message();
  EXPECT_EQ(c.wait(c.irecv(5, &byte, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.wait(c.isend(1, nullptr, 4)).code(), StatusCode::kInvalidArgument);
}

TEST(TcpChannelTest, ReceivesAreAByteStreamAcrossMessageBoundaries) {
  // ops::Channel's contract: a receive takes the next bytes, however they were sent (the ring
  // sends a chunk whole and receives it in segments).
  MemoryStore store;
  ConnectOptions options = default_options();
  options.max_frame_bytes = 700;
  auto ch = connect_group(store, 2, {}, options);
  ASSERT_TRUE(ch[0].ok() && ch[1].ok());
  const auto out = pattern(3000, 5);
  ops::Request s1 = (*ch[1])->isend(0, out.data(), 1000);
  ops::Request s2 = (*ch[1])->isend(0, out.data() + 1000, 2000);
  std::vector<uint8_t> in(3000);
  ops::Request r1 = (*ch[0])->irecv(1, in.data(), 300);
  ops::Request r2 = (*ch[0])->irecv(1, in.data() + 300, 1500);
  ops::Request r3 = (*ch[0])->irecv(1, in.data() + 1800, 1200);
  std::thread sender([&] { EXPECT_TRUE((*ch[1])->wait(s2).ok()); });
  EXPECT_TRUE((*ch[0])->wait(r3).ok());
  EXPECT_TRUE((*ch[0])->wait(r1).ok());
  EXPECT_TRUE((*ch[0])->wait(r2).ok());
  sender.join();
  EXPECT_TRUE(s1.done());
  EXPECT_EQ(in, out);
}

// A channel of rank 0 whose link to "rank 1" is a raw socket the test writes bytes into.
struct RawPeer {
  boost::asio::io_context raw_io;
  boost::asio::ip::tcp::socket raw{raw_io};
  std::unique_ptr<TcpChannel> channel;
  explicit RawPeer(uint64_t max_frame, bool integrity = false, AuthKey session = {}) {
    auto io = std::make_unique<boost::asio::io_context>(1);
    boost::asio::ip::tcp::acceptor acceptor(*io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    raw.connect(acceptor.local_endpoint());
    auto s = std::make_unique<boost::asio::ip::tcp::socket>(*io);
    acceptor.accept(*s);
    std::vector<PeerSocket> peers;
    peers.push_back(PeerSocket{1, "raw", std::make_unique<StreamSocket>(std::move(*s)), session});
    TcpChannelOptions o;
    o.op_timeout = milliseconds(5000);
    o.max_frame_bytes = max_frame;
    o.integrity = integrity;
    channel = std::make_unique<TcpChannel>(0, 2, std::move(io), std::move(peers), o);
  }
  void write(const void* p, size_t n) { boost::asio::write(raw, boost::asio::buffer(p, n)); }
};

// KOLO_TCP_INTEGRITY: every size, multi-frame messages (above kTaggedFrameBytes) and receives
// that split frames arrive exactly, over AF_UNIX and over TCP.
TEST(TcpChannelTest, IntegrityTagsCarryEveryMessageExactly) {
  for (bool unix_socket : {true, false}) {
    MemoryStore store;
    ConnectOptions options = default_options();
    options.integrity = true;
    options.same_host_unix = unix_socket;
    auto ch = connect_group(store, 2, {}, options);
    ASSERT_TRUE(ch[0].ok()) << ch[0].status().to_string();
    ASSERT_TRUE(ch[1].ok()) << ch[1].status().to_string();
    for (size_t n : {size_t{1}, size_t{4096}, size_t{kTaggedFrameBytes} + 3, size_t{9} << 20}) {
      std::thread other([&] {
        std::vector<uint8_t> in(n, 0);
        const auto out = pattern(n, 1);
        EXPECT_TRUE((*ch[1])->sendrecv(0, out.data(), n, 0, in.data(), n).ok());
        EXPECT_EQ(in, pattern(n, 0));
      });
      // Rank 0 receives the message in two pieces that do not follow the frames.
      const auto out = pattern(n, 0);
      std::vector<uint8_t> in(n, 0);
      const size_t first = n / 3;
      ops::Request s = (*ch[0])->isend(1, out.data(), n);
      ops::Request r1 = (*ch[0])->irecv(1, in.data(), first);
      ops::Request r2 = (*ch[0])->irecv(1, in.data() + first, n - first);
      EXPECT_TRUE((*ch[0])->wait(r2).ok());
      EXPECT_TRUE((*ch[0])->wait(r1).ok());
      EXPECT_TRUE((*ch[0])->wait(s).ok());
      other.join();
      EXPECT_EQ(in, pattern(n, 1)) << n << " bytes, unix " << unix_socket;
    }
  }
}

// A tagged frame as rank 1 sends its `seq`-th frame to rank 0 under `session`.
std::vector<uint8_t> tagged_frame(const AuthKey& session, uint64_t seq,
                                  const std::vector<uint8_t>& payload) {
  const FrameHeader h = encode_frame_header(payload.size(), kFrameTagged);
  const FrameTag t = frame_tag(frame_key(session, 1, 0), seq, h, payload.data(), payload.size());
  std::vector<uint8_t> f(h.begin(), h.end());
  f.insert(f.end(), payload.begin(), payload.end());
  f.insert(f.end(), t.begin(), t.end());
  return f;
}

// The receiver of tagged frames takes a frame only with the right tag in the right order: a
// flipped bit, a replayed frame, a dropped frame, a frame under another key or without a tag
// each fail the receive naming the peer and "integrity", and the receive buffer never sees the
// bad bytes.
TEST(TcpChannelTest, IntegrityRefusesAlteredReplayedDroppedAndUntaggedFrames) {
  const AuthKey session{{1, 2}, {3, 4}};
  const std::vector<uint8_t> payload = pattern(1000, 5);
  enum Attack { kFlip, kReplay, kDrop, kWrongKey, kUntagged };
  for (Attack attack : {kFlip, kReplay, kDrop, kWrongKey, kUntagged}) {
    RawPeer peer(1 << 20, true, session);
    std::vector<uint8_t> in(payload.size(), 0);
    const std::vector<uint8_t> f0 = tagged_frame(session, 0, payload);
    if (attack == kReplay || attack == kDrop) {
      // The first frame is genuine and arrives.
      peer.write(f0.data(), f0.size());
      ASSERT_TRUE(peer.channel->recv(1, in.data(), in.size()).ok());
      ASSERT_EQ(in, payload);
      std::fill(in.begin(), in.end(), 0);
    }
    std::vector<uint8_t> bad;
    switch (attack) {
      case kFlip:
        bad = f0;
        bad[kFrameHeaderBytes + 500] ^= 0x80;
        break;
      case kReplay:
        bad = f0;
        break;
      case kDrop:
        bad = tagged_frame(session, 2, payload);  // frame 1 never came
        break;
      case kWrongKey:
        bad = tagged_frame(AuthKey{{1, 2}, {3, 5}}, 0, payload);
        break;
      case kUntagged: {
        const FrameHeader h = encode_frame_header(payload.size());
        bad.assign(h.begin(), h.end());
        bad.insert(bad.end(), payload.begin(), payload.end());
        break;
      }
    }
    peer.write(bad.data(), bad.size());
    Status s = peer.channel->recv(1, in.data(), in.size());
    EXPECT_EQ(s.code(), StatusCode::kIoError) << attack << ": " << s.to_string();
    EXPECT_NE(s.message().find("integrity"), std::string::npos) << attack << ": " << s.message();
    EXPECT_NE(s.message().find("rank 1 (raw)"), std::string::npos) << s.message();
    EXPECT_EQ(in, std::vector<uint8_t>(payload.size(), 0)) << attack << ": bad bytes were used";
    EXPECT_EQ(peer.channel->recv(1, in.data(), 1).code(), StatusCode::kIoError);  // stays broken
  }
}

TEST(TcpChannelTest, MalformedFrameIsAClearErrorAndBreaksTheLink) {
  RawPeer peer(1 << 20);
  std::vector<uint8_t> junk(32, 0x77);
  peer.write(junk.data(), junk.size());
  std::vector<uint8_t> in(8);
  Status s = peer.channel->recv(1, in.data(), in.size());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s.message();
  EXPECT_EQ(peer.channel->recv(1, in.data(), 1).code(), StatusCode::kIoError);  // stays broken
}

TEST(TcpChannelTest, OversizedFrameIsRefusedWithoutAllocating) {
  RawPeer peer(4096);
  const FrameHeader h = encode_frame_header(uint64_t{1} << 40);
  peer.write(h.data(), h.size());
  std::vector<uint8_t> in(8);
  Status s = peer.channel->recv(1, in.data(), in.size());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("oversized"), std::string::npos) << s.message();
}

TEST(TcpChannelTest, TruncatedFrameIsAPeerFailure) {
  RawPeer peer(4096);
  const FrameHeader h = encode_frame_header(100);
  peer.write(h.data(), h.size());
  peer.write(h.data(), 10);  // 10 of the promised 100 payload bytes, then the peer goes away
  peer.raw.close();
  std::vector<uint8_t> in(100);
  Status s = peer.channel->recv(1, in.data(), in.size());
  EXPECT_EQ(s.code(), StatusCode::kPeerFailure);
  EXPECT_NE(s.message().find("closed by the peer"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("after 10 of its bytes"), std::string::npos) << s.message();
}

TEST(TcpChannelTest, PeerClosingMidTransferFailsPendingAndLaterRequests) {
  MemoryStore store;
  auto ch = connect_group(store, 2);
  ASSERT_TRUE(ch[0].ok() && ch[1].ok());
  const size_t n = size_t{64} << 20;
  std::vector<uint8_t> out(n, 3), in(n);
  // Rank 1 starts a message larger than the socket buffers, then dies (its channel closes).
  ops::Request partial = (*ch[1])->isend(0, out.data(), n);
  ch[1] = Status::Aborted("closed");
  EXPECT_TRUE(partial.done());
  Status s = (*ch[0])->recv(1, in.data(), n);
  EXPECT_EQ(s.code(), StatusCode::kPeerFailure) << s.to_string();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  Status later = (*ch[0])->send(1, out.data(), 10);
  EXPECT_EQ(later.code(), StatusCode::kPeerFailure);
}

// The timeout names the peer, and the setting it came from: a control plane bounded by the
// stall shutdown time used to say KOLO_OP_TIMEOUT, which the user may have set to a minute.
TEST(TcpChannelTest, NoProgressTimesOutNamingThePeerAndTheSetting) {
  for (const std::string knob : {"", "KOLO_STALL_SHUTDOWN_TIME"}) {
    SCOPED_TRACE("op_timeout_knob " + knob);
    MemoryStore store;
    std::vector<Result<std::unique_ptr<TcpChannel>>> ch;
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) ch.emplace_back(Status::Internal("not run"));
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        BackendContext c = context(store, r, 2);
        c.op_timeout = milliseconds(200);
        if (!knob.empty()) c.op_timeout_knob = knob;
        ch[r] = connect_channel(c, default_options());
      });
    for (auto& t : threads) t.join();
    ASSERT_TRUE(ch[0].ok() && ch[1].ok());
    uint8_t byte = 0;
    Status s = (*ch[0])->recv(1, &byte, 1);  // rank 1 never sends
    EXPECT_EQ(s.code(), StatusCode::kTimeout);
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
    const std::string named = knob.empty() ? "KOLO_OP_TIMEOUT" : knob;
    EXPECT_NE(s.message().find("for 200 ms (" + named + ")"), std::string::npos) << s.message();
    EXPECT_EQ((*ch[0])->recv(1, &byte, 1).code(), StatusCode::kTimeout);  // stays broken
  }
}

// A same-host pair switches to AF_UNIX only when both ranks allow it; any mix of settings still
// connects, carries data, and (through the error text, which names the link) shows which kind
// of socket it uses.
TEST(TcpChannelTest, SameHostSocketSubstitutionFollowsBothRanksSettings) {
  for (int mask = 0; mask < 4; ++mask) {
    SCOPED_TRACE("rank 0 allows AF_UNIX: " + std::to_string(mask & 1) +
                 ", rank 1: " + std::to_string(mask >> 1));
    MemoryStore store;
    std::vector<Result<std::unique_ptr<TcpChannel>>> ch;
    for (int r = 0; r < 2; ++r) ch.emplace_back(Status::Internal("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        BackendContext c = context(store, r, 2);
        c.op_timeout = milliseconds(100);
        ConnectOptions o = default_options();
        o.same_host_unix = ((mask >> r) & 1) != 0;
        ch[r] = connect_channel(c, o);
      });
    for (auto& t : threads) t.join();
    ASSERT_TRUE(ch[0].ok()) << ch[0].status().to_string();
    ASSERT_TRUE(ch[1].ok()) << ch[1].status().to_string();
    const size_t n = size_t{1} << 20;
    std::thread other([&] {
      std::vector<uint8_t> in(n);
      const auto out = pattern(n, 1);
      EXPECT_TRUE((*ch[1])->sendrecv(0, out.data(), n, 0, in.data(), n).ok());
      EXPECT_EQ(in, pattern(n, 0));
    });
    std::vector<uint8_t> in(n);
    const auto out = pattern(n, 0);
    EXPECT_TRUE((*ch[0])->sendrecv(1, out.data(), n, 1, in.data(), n).ok());
    other.join();
    EXPECT_EQ(in, pattern(n, 1));
    uint8_t byte = 0;
    Status s = (*ch[0])->recv(1, &byte, 1);  // rank 1 sends nothing more
    ASSERT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    EXPECT_EQ(s.message().find("via AF_UNIX") != std::string::npos, mask == 3) << s.message();
  }
}

TEST(TcpChannelTest, WrongSecretIsRefusedOnBothSides) {
  MemoryStore store;
  auto ch = connect_group(store, 2, {"right", "wrong"}, default_options(), milliseconds(1500));
  ASSERT_FALSE(ch[0].ok());
  ASSERT_FALSE(ch[1].ok());
  // The connector learns at once; the acceptor keeps waiting for the right peer, then says why.
  EXPECT_EQ(ch[1].status().code(), StatusCode::kPeerFailure);
  EXPECT_NE(ch[1].status().message().find("rank 0"), std::string::npos);
  EXPECT_NE(ch[1].status().message().find("secret"), std::string::npos);
  EXPECT_EQ(ch[0].status().code(), StatusCode::kTimeout);
  EXPECT_NE(ch[0].status().message().find("rank 1"), std::string::npos);
  EXPECT_NE(ch[0].status().message().find("secret"), std::string::npos) << ch[0].status().message();
}

TEST(TcpChannelTest, AnIntruderDoesNotStopTheRightPeer) {
  MemoryStore store;
  Result<std::unique_ptr<TcpChannel>> rank0 = Status::Internal("not run");
  std::thread t0([&] { rank0 = connect_channel(context(store, 0, 2), default_options()); });
  Result<HostPortText> hp = published_address(store, 0);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket s(io);
    s.connect({boost::asio::ip::make_address(hp->host), static_cast<unsigned short>(hp->port)});
    std::vector<uint8_t> junk(64, 0x5a);
    boost::asio::write(s, boost::asio::buffer(junk));
  }
  Result<std::unique_ptr<TcpChannel>> rank1 =
      connect_channel(context(store, 1, 2), default_options());
  t0.join();
  ASSERT_TRUE(rank0.ok()) << rank0.status().to_string();
  ASSERT_TRUE(rank1.ok()) << rank1.status().to_string();
  int v = 42, got = 0;
  ASSERT_TRUE((*rank1)->send(0, &v, sizeof v).ok());
  ASSERT_TRUE((*rank0)->recv(1, &got, sizeof got).ok());
  EXPECT_EQ(got, 42);
}

// Issue 16: rank 0 authenticated one connection at a time with 10 s for each, so 3-4 idle
// sockets used up the connect timeout and the job never started. Handshakes now run at once.
TEST(TcpChannelTest, IdleHalfSentAndRandomConnectionsDoNotStarveTheRealPeer) {
  MemoryStore store;
  BackendContext c0 = context(store, 0, 2), c1 = context(store, 1, 2);
  c0.connect_timeout = c1.connect_timeout = milliseconds(5000);
  Result<std::unique_ptr<TcpChannel>> rank0 = Status::Internal("not run");
  std::thread t0([&] { rank0 = connect_channel(c0, default_options()); });
  Result<HostPortText> hp = published_address(store, 0);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  boost::asio::io_context io;
  std::mt19937 rng(16);
  std::vector<boost::asio::ip::tcp::socket> idle;
  for (int i = 0; i < 100; ++i) {
    idle.emplace_back(io);
    idle.back().connect(
        {boost::asio::ip::make_address(hp->host), static_cast<unsigned short>(hp->port)});
    if (i % 3 == 1) {  // the start of a hello, then nothing
      const std::array<uint8_t, 8> start{'K', 'H', 'H', 'L', 2, 0, 0, 0};
      boost::asio::write(idle.back(), boost::asio::buffer(start));
    } else if (i % 3 == 2) {  // a hello with the right magic and random fields, or random bytes
      std::vector<uint8_t> junk(rng() % 100);
      for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
      if (junk.size() >= 8 && rng() % 2) std::copy_n("KHHL\x02\0\0\0", 8, junk.begin());
      boost::system::error_code ignored;
      boost::asio::write(idle.back(), boost::asio::buffer(junk), ignored);
    }
  }
  Result<std::unique_ptr<TcpChannel>> rank1 = connect_channel(c1, default_options());
  t0.join();
  ASSERT_TRUE(rank0.ok()) << rank0.status().to_string();
  ASSERT_TRUE(rank1.ok()) << rank1.status().to_string();
  int v = 7, got = 0;
  ASSERT_TRUE((*rank1)->send(0, &v, sizeof v).ok());
  ASSERT_TRUE((*rank0)->recv(1, &got, sizeof got).ok());
  EXPECT_EQ(got, 7);
}

// A man in the middle on loopback: accepts one connection, connects to `target` and passes the
// bytes through unchanged both ways, counting them.
class Relay {
 public:
  Relay(const std::string& host, int port)
      : acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}),
        thread_([this, host, port] { run(host, port); }) {}
  // shutdown(), unlike close(), wakes a thread blocked on the socket.
  ~Relay() {
    boost::system::error_code ignored;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);
    client_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    server_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    thread_.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  size_t forwarded() const { return forwarded_; }

 private:
  void run(const std::string& host, int port) {
    boost::system::error_code ec;
    acceptor_.accept(client_, ec);
    if (!ec)
      server_.connect({boost::asio::ip::make_address(host), static_cast<unsigned short>(port)}, ec);
    if (ec) return;
    std::thread back([this] { pump(server_, client_); });
    pump(client_, server_);
    back.join();
  }
  void pump(boost::asio::ip::tcp::socket& from, boost::asio::ip::tcp::socket& to) {
    char buf[4096];
    boost::system::error_code ec;
    while (true) {
      const size_t n = from.read_some(boost::asio::buffer(buf), ec);
      if (ec) break;
      boost::asio::write(to, boost::asio::buffer(buf, n), ec);
      if (ec) break;
      forwarded_ += n;
    }
    boost::system::error_code ignored;
    to.shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
  }
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::ip::tcp::socket client_{io_};
  boost::asio::ip::tcp::socket server_{io_};
  std::atomic<size_t> forwarded_{0};
  std::thread thread_;
};

// Issue 16: an outsider who could rewrite rank 0's address put a relay between the ranks; it
// passed the challenge and the response through and both ranks accepted each other. Now each
// side binds the endpoints it sees into the handshake, so neither accepts.
TEST(TcpChannelTest, ARelayBetweenTheRanksCannotCompleteTheHandshake) {
  MemoryStore store;
  BackendContext c0 = context(store, 0, 2), c1 = context(store, 1, 2);
  c0.connect_timeout = c1.connect_timeout = milliseconds(1500);
  Result<std::unique_ptr<TcpChannel>> rank0 = Status::Internal("not run");
  std::thread t0([&] { rank0 = connect_channel(c0, default_options()); });
  Result<HostPortText> hp = published_address(store, 0);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  auto relay = std::make_unique<Relay>(hp->host, hp->port);
  ASSERT_TRUE(store.set("test/tcp/addr/0", relay->address()).ok());
  Result<std::unique_ptr<TcpChannel>> rank1 = connect_channel(c1, default_options());
  t0.join();
  // The relay carried the hello, the challenge and the (refused) proof.
  EXPECT_GE(relay->forwarded(), kHelloBytes + kChallengeBytes + kProofBytes);
  relay.reset();
  ASSERT_FALSE(rank1.ok());
  EXPECT_EQ(rank1.status().code(), StatusCode::kPeerFailure);
  EXPECT_NE(rank1.status().message().find("authentication of rank 0"), std::string::npos)
      << rank1.status().message();
  EXPECT_NE(rank1.status().message().find("or a relay sits between the two ranks"),
            std::string::npos)
      << rank1.status().message();
  ASSERT_FALSE(rank0.ok());
  EXPECT_EQ(rank0.status().code(), StatusCode::kTimeout);
  EXPECT_NE(rank0.status().message().find("rejected this rank's proof"), std::string::npos)
      << rank0.status().message();
}

TEST(TcpChannelTest, SingleRankNeedsNoStore) {
  BackendContext c;
  c.connect_timeout = milliseconds(1000);
  c.op_timeout = milliseconds(1000);
  Result<std::unique_ptr<TcpChannel>> ch = connect_channel(c, default_options());
  ASSERT_TRUE(ch.ok()) << ch.status().to_string();
  EXPECT_EQ((*ch)->size(), 1);
}

TEST(TcpChannelTest, BadContextIsInvalidArgument) {
  BackendContext c;
  c.size = 2;
  c.rank = 2;
  c.connect_timeout = milliseconds(1000);
  c.op_timeout = milliseconds(1000);
  const ConnectOptions options = default_options();
  Result<std::unique_ptr<TcpChannel>> ch = connect_channel(c, options);
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ch.status().message().find("got 2"), std::string::npos);
  c.rank = 0;
  EXPECT_NE(connect_channel(c, options).status().message().find("store"), std::string::npos);
  c.store_prefix = "x";
  MemoryStore store;
  c.store = &store;
  c.connect_timeout = milliseconds(0);
  EXPECT_EQ(connect_channel(c, options).status().message(),
            "tcp: context.connect_timeout must be > 0 ms, got 0");
  c.connect_timeout = milliseconds(1000);
  c.op_timeout = milliseconds(0);
  EXPECT_EQ(connect_channel(c, options).status().message(),
            "tcp: context.op_timeout must be > 0 ms, got 0");
  c.op_timeout = milliseconds(1000);
  ConnectOptions unbounded = options;  // a ConnectOptions not made by connect_options()
  unbounded.max_frame_bytes = 0;
  EXPECT_EQ(connect_channel(c, unbounded).status().message(),
            "tcp: options.max_frame_bytes must be > 0, got 0 (connect_options() reads "
            "KOLO_TCP_MAX_FRAME)");
}

}  // namespace
}  // namespace kolo::tcp
