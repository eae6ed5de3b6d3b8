// make_tcp_backend end to end: ranks as threads, real loopback sockets, the ops/ algorithms.
#include "backends/tcp/tcp_backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

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

TEST(TcpBackendTest, InvalidTuningEnvIsNamed) {
  ::setenv("KOLO_TCP_SEGMENT", "lots", 1);
  MemoryStore store;
  Result<std::unique_ptr<Backend>> b = make_tcp_backend(context(store, 0, 1));
  ::unsetenv("KOLO_TCP_SEGMENT");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("KOLO_TCP_SEGMENT"), std::string::npos)
      << b.status().message();
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
