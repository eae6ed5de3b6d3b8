// One typed suite runs against every Store: the in-process MemoryStore, FileStore over a temp
// directory and TcpStore against a real TcpStoreServer on loopback. Each "backing" hands out
// independent clients that see the same table, as separate ranks would.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "rendezvous/file_store.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/tcp_store.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;

struct MemoryBacking {
  std::shared_ptr<MemoryStore> shared = std::make_shared<MemoryStore>();
  // Clients of one MemoryStore are the store itself (shared, non-owning view).
  struct View : Store {
    std::shared_ptr<MemoryStore> s;
    Status set(const std::string& k, const std::string& v) override { return s->set(k, v); }
    Result<std::string> get(const std::string& k, std::chrono::milliseconds t) override {
      return s->get(k, t);
    }
    Status wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override {
      return s->wait(k, t);
    }
    Result<int64_t> add(const std::string& k, int64_t d) override { return s->add(k, d); }
    Result<bool> check(const std::string& k) override { return s->check(k); }
  };
  std::unique_ptr<Store> client() {
    auto v = std::make_unique<View>();
    v->s = shared;
    return v;
  }
};

struct FileBacking {
  std::string dir;
  FileBacking() {
    dir =
        (std::filesystem::temp_directory_path() /
         ("kolo_file_store_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++)))
            .string();
  }
  ~FileBacking() { std::filesystem::remove_all(dir); }
  static std::atomic<int>& counter() {
    static std::atomic<int> c{0};
    return c;
  }
  std::unique_ptr<Store> client() {
    auto s = FileStore::open(dir);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return std::move(s).value();
  }
};

struct TcpBacking {
  std::unique_ptr<TcpStoreServer> server;
  TcpBacking() {
    auto s = TcpStoreServer::start("127.0.0.1", 0, "store-test");
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    server = std::move(s).value();
  }
  std::unique_ptr<Store> client() {
    auto c = TcpStore::connect({"127.0.0.1", server->port()}, "store-test", 5s, 5s);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return std::move(c).value();
  }
};

template <typename Backing>
class StoreTest : public ::testing::Test {
 protected:
  Backing backing;
};

using Backings = ::testing::Types<MemoryBacking, FileBacking, TcpBacking>;
TYPED_TEST_SUITE(StoreTest, Backings);

TYPED_TEST(StoreTest, SetThenGetReturnsValue) {
  auto s = this->backing.client();
  ASSERT_TRUE(s->set("a", "hello").ok());
  auto v = s->get("a", 1s);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(*v, "hello");
  ASSERT_TRUE(s->set("a", "again").ok());
  EXPECT_EQ(s->get("a", 1s).value(), "again");
}

TYPED_TEST(StoreTest, BinaryValuesAndSlashKeysRoundTrip) {
  auto s = this->backing.client();
  std::string value("\0\x01\xff\n", 4);
  ASSERT_TRUE(s->set("kolo/tcp/addr/0", value).ok());
  EXPECT_EQ(s->get("kolo/tcp/addr/0", 1s).value(), value);
  ASSERT_TRUE(s->set("empty", "").ok());
  EXPECT_EQ(s->get("empty", 1s).value(), "");
}

TYPED_TEST(StoreTest, LargeValueRoundTrips) {
  auto s = this->backing.client();
  std::string value(1 << 20, 'x');
  value[12345] = 'y';
  ASSERT_TRUE(s->set("big", value).ok());
  EXPECT_EQ(s->get("big", 1s).value(), value);
}

TYPED_TEST(StoreTest, GetTimesOutNamingTheKey) {
  auto s = this->backing.client();
  auto v = s->get("never", 50ms);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_EQ(v.status().message(), "store get timed out after 50ms: missing key: never");
}

TYPED_TEST(StoreTest, WaitTimesOutNamingOnlyMissingKeys) {
  auto s = this->backing.client();
  ASSERT_TRUE(s->set("x", "1").ok());
  Status st = s->wait({"x", "y", "z"}, 50ms);
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_EQ(st.message(), "store wait timed out after 50ms: missing keys: y, z");
  EXPECT_TRUE(s->wait({"x"}, 0ms).ok());
  EXPECT_TRUE(s->wait({}, 0ms).ok());
}

TYPED_TEST(StoreTest, AddCountsFromZeroAndReadsBackAsText) {
  auto s = this->backing.client();
  EXPECT_EQ(s->add("n", 1).value(), 1);
  EXPECT_EQ(s->add("n", 5).value(), 6);
  EXPECT_EQ(s->add("n", -10).value(), -4);
  EXPECT_EQ(s->get("n", 1s).value(), "-4");
  EXPECT_EQ(s->add("n", 0).value(), -4);
}

TYPED_TEST(StoreTest, AddOnNonCounterIsInvalidArgument) {
  auto s = this->backing.client();
  ASSERT_TRUE(s->set("word", "abc").ok());
  auto r = s->add("word", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a decimal int64"), std::string::npos)
      << r.status().message();
}

TYPED_TEST(StoreTest, CheckDoesNotWait) {
  auto s = this->backing.client();
  EXPECT_FALSE(s->check("k").value());
  ASSERT_TRUE(s->set("k", "v").ok());
  EXPECT_TRUE(s->check("k").value());
}

TYPED_TEST(StoreTest, BadArgumentsAreRejected) {
  auto s = this->backing.client();
  EXPECT_EQ(s->set("", "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->set(std::string("a\0b", 3), "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->set(std::string(kMaxStoreKeyBytes + 1, 'k'), "v").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(s->get("k", -1ms).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->get("k", -1ms).status().message(), "store get: timeout must be >= 0 ms, got -1 ms");
}

TYPED_TEST(StoreTest, WaitWakesWhenAnotherClientSets) {
  auto waiter = this->backing.client();
  auto setter = this->backing.client();
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(setter->set("late", "v").ok());
  });
  Status st = waiter->wait({"late"}, 10s);
  t.join();
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(waiter->get("late", 0ms).value(), "v");
}

TYPED_TEST(StoreTest, OneClientSharedByThreadsDoesNotBlockBehindAWait) {
  // A thread blocked in wait() on a client must not stop another thread's set() on the same
  // client: otherwise a rank waiting for its own announcement would deadlock.
  auto s = this->backing.client();
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(s->set("mine", "1").ok());
  });
  Status st = s->wait({"mine"}, 10s);
  t.join();
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TYPED_TEST(StoreTest, ConcurrentAddsFromManyClientsAreAtomic) {
  constexpr int kThreads = 4;
  constexpr int kAdds = 25;
  std::vector<std::unique_ptr<Store>> clients;
  for (int i = 0; i < kThreads; ++i) clients.push_back(this->backing.client());
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      for (int j = 0; j < kAdds; ++j) ASSERT_TRUE(clients[i]->add("counter", 1).ok());
      ASSERT_TRUE(clients[i]->set("done/" + std::to_string(i), "1").ok());
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(clients[0]->get("counter", 1s).value(), std::to_string(kThreads * kAdds));
  EXPECT_TRUE(clients[0]->wait({"done/0", "done/1", "done/2", "done/3"}, 1s).ok());
}

}  // namespace
}  // namespace kolo
