// make_tcp_backend end to end: ranks as threads, real loopback sockets, the ops/ algorithms.
#include "backends/tcp/tcp_backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "backends/channel_backend.h"
#include "backends/tcp/tcp_connect.h"
#include "backends/tcp/tcp_knobs.h"
#include "common/knobs.h"
#include "rendezvous/memory_store.h"

namespace kolo {
namespace {

BackendContext context(Store& store, int rank, int size,
                       const KnobSet& knobs = KnobSet::defaults()) {
  BackendContext c;
  c.knobs = &knobs;
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

KnobSet read_knobs(const std::map<std::string, std::string>& env) {
  Result<KnobSet> knobs = KnobSet::read(env);
  EXPECT_TRUE(knobs.ok()) << knobs.status().to_string();
  return knobs.ok() ? *knobs : KnobSet::defaults();
}

// The factory takes its options from the context's knobs (what init() parsed), never from the
// environment: a bad value there changes nothing, and the ring knobs reach the ChannelBackend.
TEST(TcpBackendTest, TheFactoryReadsTheContextsKnobsNotTheEnvironment) {
  MemoryStore store;
  ::setenv("KOLO_RING_SEGMENT", "lots", 1);
  ::setenv("KOLO_TCP_UNIX", "maybe", 1);
  const KnobSet knobs = read_knobs({{"KOLO_RING_SEGMENT", "4096"}, {"KOLO_RING_THRESHOLD", "0"}});
  Result<std::unique_ptr<Backend>> b = make_tcp_backend(context(store, 0, 1, knobs));
  ::unsetenv("KOLO_RING_SEGMENT");
  ::unsetenv("KOLO_TCP_UNIX");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const ops::AllreduceTuning& t = static_cast<ChannelBackend&>(**b).tuning();
  EXPECT_EQ(t.segment_bytes, 4096u);
  EXPECT_EQ(t.small_message_bytes, 0u);

  BackendContext without = context(store, 0, 1);
  without.knobs = nullptr;
  b = make_tcp_backend(without);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(),
            "tcp: context.knobs is not set (the KnobSet that kolo::init() parsed)");
}

TEST(TcpBackendTest, ConnectOptionsComeFromTheKnobs) {
  const tcp::ConnectOptions set =
      tcp::connect_options(read_knobs({{"KOLO_TCP_HOST", "10.0.0.7"},
                                       {"KOLO_TCP_SOCKET_BUFFER", "64KiB"},
                                       {"KOLO_TCP_MAX_FRAME", "1MiB"},
                                       {"KOLO_TCP_SPIN", "500ns"},
                                       {"KOLO_TCP_UNIX", "off"},
                                       {"KOLO_TCP_INTEGRITY", "on"}}));
  EXPECT_EQ(set.host, "10.0.0.7");
  EXPECT_EQ(set.socket_buffer_bytes, 64u << 10);
  EXPECT_EQ(set.max_frame_bytes, 1u << 20);
  EXPECT_EQ(set.spin, std::chrono::microseconds(1));  // rounded up, not off
  EXPECT_FALSE(set.same_host_unix);
  EXPECT_TRUE(set.integrity);
  // Unset, each is its row's default.
  const KnobSet& d = KnobSet::defaults();
  const tcp::ConnectOptions o = tcp::connect_options(d);
  EXPECT_EQ(o.host, "");
  EXPECT_EQ(o.socket_buffer_bytes, d.size(tcp_knobs::kSocketBuffer));
  EXPECT_EQ(o.max_frame_bytes, d.size(tcp_knobs::kMaxFrame));
  EXPECT_EQ(o.spin, d.duration(tcp_knobs::kSpin));
  EXPECT_EQ(o.same_host_unix, d.boolean(tcp_knobs::kUnix));
  EXPECT_EQ(o.integrity, d.boolean(tcp_knobs::kIntegrity));
}

// The tcp folder's rows and retired names are the registry's: validated by KnobSet::read (so by
// init() and kolorun), with the errors naming the variable.
TEST(TcpBackendTest, TheFoldersKnobRowsAreValidatedByTheRegistry) {
  for (const Knob* k : {&tcp_knobs::kHost, &tcp_knobs::kSocketBuffer, &tcp_knobs::kMaxFrame,
                        &tcp_knobs::kUnix, &tcp_knobs::kIntegrity, &tcp_knobs::kSpin}) {
    const Knob* row = find_knob(k->name);
    ASSERT_NE(row, nullptr) << k->name;
    EXPECT_EQ(row->backend, "tcp");
    EXPECT_EQ(category_name(*row), "tcp backend");
  }
  for (const char* name : {"KOLO_TCP_SPIN", "KOLO_TCP_UNIX"}) {
    Result<KnobSet> bad = KnobSet::read({{name, "2"}});  // above 1 s / not a bool
    ASSERT_FALSE(bad.ok()) << name;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_EQ(bad.status().message().rfind(std::string(name) + "=2 is invalid: expected", 0), 0u)
        << bad.status().message();
  }
  Result<KnobSet> retired = KnobSet::read({{"KOLO_TCP_SEGMENT", "1MiB"}});
  ASSERT_FALSE(retired.ok());
  EXPECT_EQ(retired.status().message(),
            "KOLO_TCP_SEGMENT was renamed KOLO_RING_SEGMENT: set KOLO_RING_SEGMENT=1MiB instead");
}

}  // namespace
}  // namespace kolo
