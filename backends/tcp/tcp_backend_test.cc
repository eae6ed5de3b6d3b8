// make_tcp_backend end to end: ranks as threads, real loopback sockets, the ops/ algorithms.
#include "backends/tcp/tcp_backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "backends/tcp/tcp_connect.h"
#include "common/knobs.h"
#include "rendezvous/memory_store.h"

namespace kolo {
namespace {

BackendContext context(Store& store, int rank, int size) {
  BackendContext c;
  c.rank = rank;
  c.size = size;
  c.local_size = size;
  c.store = &store;
  c.store_prefix = "job";
  c.secret = "backend-test";
  c.connect_timeout = std::chrono::milliseconds(10000);
  c.op_timeout = std::chrono::milliseconds(10000);
  return c;
}

// Every rank contributes rank + 1 + i at element i; the sum is size*(size+1)/2 + size*i.
void run_allreduce(int size, int64_t count) {
  MemoryStore store;
  std::vector<std::thread> threads;
  std::vector<Status> status(size);
  std::vector<std::vector<float>> data(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Result<std::unique_ptr<Backend>> backend = make_tcp_backend(context(store, r, size));
      if (!backend.ok()) {
        status[r] = backend.status();
        return;
      }
      EXPECT_EQ((*backend)->name(), "tcp");
      EXPECT_EQ((*backend)->rank(), r);
      data[r].resize(count);
      for (int64_t i = 0; i < count; ++i) data[r][i] = static_cast<float>(r + 1 + i % 1000);
      status[r] = (*backend)->allreduce(data[r].data(), data[r].data(), count, DataType::kFloat32,
                                        Reduction{});
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r].to_string();
    for (int64_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(size * (size + 1) / 2 + size * (i % 1000));
      ASSERT_EQ(data[r][i], want) << "rank " << r << " element " << i;
    }
  }
}

TEST(TcpBackendTest, AllreduceTwoRanksSmallAndLarge) {
  run_allreduce(2, 1000);    // recursive doubling
  run_allreduce(2, 300000);  // segmented ring
}

TEST(TcpBackendTest, AllreduceThreeRanks) { run_allreduce(3, 100001); }

TEST(TcpBackendTest, AllreduceFourRanks) {
  run_allreduce(4, 7);
  run_allreduce(4, 200003);
}

TEST(TcpBackendTest, AllreduceEmptyTensor) { run_allreduce(2, 0); }

TEST(TcpBackendTest, ControlAndDataChannelsConnectSideBySide) {
  // Two channels per group under different prefixes: e.g. the coordinator's control lane beside
  // the data lane, so control messages never queue behind bulk data.
  MemoryStore store;
  std::vector<std::unique_ptr<ops::Channel>> data(2), control(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      BackendContext c = context(store, r, 2);
      auto d = connect_tcp_channel(c);
      c.store_prefix = "job/control";
      auto k = connect_tcp_channel(c);
      ASSERT_TRUE(d.ok() && k.ok());
      data[r] = std::move(d.value());
      control[r] = std::move(k.value());
    });
  for (auto& t : threads) t.join();
  ASSERT_TRUE(data[0] && control[0] && data[1] && control[1]);
  // A bulk send posted first on the data lane does not hold up the control message.
  std::vector<uint8_t> bulk(16 << 20, 1);
  ops::Request big = data[0]->isend(1, bulk.data(), bulk.size());
  int msg = 7, got = 0;
  ASSERT_TRUE(control[0]->send(1, &msg, sizeof msg).ok());
  ASSERT_TRUE(control[1]->recv(0, &got, sizeof got).ok());
  EXPECT_EQ(got, 7);
  std::vector<uint8_t> in(bulk.size());
  std::thread receiver([&] { EXPECT_TRUE(data[1]->recv(0, in.data(), in.size()).ok()); });
  EXPECT_TRUE(data[0]->wait(big).ok());
  receiver.join();
  EXPECT_EQ(in, bulk);
}

TEST(TcpBackendTest, InvalidTuningEnvIsNamedBeforeConnecting) {
  MemoryStore store;
  ::setenv("KOLO_RING_SEGMENT", "lots", 1);
  Result<std::unique_ptr<Backend>> b = make_tcp_backend(context(store, 0, 1));
  ::unsetenv("KOLO_RING_SEGMENT");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message().rfind("KOLO_RING_SEGMENT=lots is invalid: expected a size", 0), 0u)
      << b.status().message();
  // The tcp-only name of the merged pair is retired, and says so.
  ::setenv("KOLO_TCP_SEGMENT", "1MiB", 1);
  b = make_tcp_backend(context(store, 0, 1));
  ::unsetenv("KOLO_TCP_SEGMENT");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(),
            "KOLO_TCP_SEGMENT was renamed KOLO_RING_SEGMENT: set KOLO_RING_SEGMENT=1MiB instead");
}

TEST(TcpBackendTest, ConnectOptionsDefaultsAreTheRegistrys) {
  Result<KnobSet> knobs = KnobSet::read({});
  ASSERT_TRUE(knobs.ok());
  const tcp::ConnectOptions o;
  EXPECT_EQ(o.host, knobs->text(KnobId::kTcpHost));
  EXPECT_EQ(o.socket_buffer_bytes, knobs->size(KnobId::kTcpSocketBuffer));
  EXPECT_EQ(o.max_frame_bytes, knobs->size(KnobId::kTcpMaxFrame));
  EXPECT_EQ(o.spin, knobs->duration(KnobId::kTcpSpin));
  EXPECT_EQ(o.same_host_unix, knobs->boolean(KnobId::kTcpUnix));
  EXPECT_EQ(o.integrity, knobs->boolean(KnobId::kTcpIntegrity));
  ::setenv("KOLO_TCP_SOCKET_BUFFER", "64KiB", 1);
  ::setenv("KOLO_TCP_UNIX", "off", 1);
  Result<tcp::ConnectOptions> set = tcp::connect_options_from_env();
  ::unsetenv("KOLO_TCP_SOCKET_BUFFER");
  ::unsetenv("KOLO_TCP_UNIX");
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_EQ(set->socket_buffer_bytes, 64u << 10);
  EXPECT_FALSE(set->same_host_unix);
}

TEST(TcpBackendTest, InvalidSpinAndUnixEnvAreNamed) {
  MemoryStore store;
  for (const char* name : {"KOLO_TCP_SPIN", "KOLO_TCP_UNIX"}) {
    ::setenv(name, "2", 1);  // not a duration / not 0 or 1
    Result<std::unique_ptr<Backend>> b = make_tcp_backend(context(store, 0, 1));
    ::unsetenv(name);
    ASSERT_FALSE(b.ok()) << name;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(b.status().message().find(name), std::string::npos) << b.status().message();
  }
}

}  // namespace
}  // namespace kolo
