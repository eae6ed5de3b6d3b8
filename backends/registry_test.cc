// The registry: its names are the build's, lookups fail naming what exists, created backends
// agree with their entries, and the job's launcher is found in the documented order.
#include "backends/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/local_backend.h"
#include "common/build_info.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/tcp_store.h"

namespace kolo {
namespace {

std::vector<std::string> registered_names() {
  std::vector<std::string> names;
  for (const auto& e : registered_backends()) names.emplace_back(e.name);
  return names;
}

TEST(RegistryTest, NamesAreTheBackendsOfTheBuild) {
  std::vector<std::string> registered = registered_names();
  std::vector<std::string> built(built_backends().begin(), built_backends().end());
  std::sort(registered.begin(), registered.end());
  EXPECT_EQ(registered, built);
  // shm comes first (for jobs on one host), then tcp, which is always built.
  ASSERT_GE(registered_backends().size(), 2u);
  EXPECT_EQ(registered_backends()[0].name, "shm");
  EXPECT_TRUE(registered_backends()[0].one_host);
  EXPECT_EQ(registered_backends()[1].name, "tcp");
  EXPECT_FALSE(registered_backends()[1].one_host);
}

TEST(RegistryTest, EveryEntryIsComplete) {
  for (const auto& e : registered_backends()) {
    SCOPED_TRACE(std::string(e.name));
    EXPECT_NE(e.factory, nullptr);
    EXPECT_FALSE(e.devices.empty());
    // A launcher is all or nothing.
    EXPECT_EQ(e.launcher.detect == nullptr, e.launcher.world == nullptr);
    EXPECT_EQ(e.launcher.detect == nullptr, e.launcher.name.empty());
  }
  auto tcp = find_backend("tcp");
  ASSERT_TRUE(tcp.ok()) << tcp.status().to_string();
  EXPECT_EQ((*tcp)->devices, std::vector<DeviceKind>{DeviceKind::kCpu});
  EXPECT_EQ((*tcp)->launcher.detect, nullptr);
  if (built_with_mpi()) {
    auto mpi = find_backend("mpi");
    ASSERT_TRUE(mpi.ok()) << mpi.status().to_string();
    EXPECT_EQ((*mpi)->launcher.name, "mpirun");
    EXPECT_TRUE((*mpi)->launcher.default_backend);
  }
}

TEST(RegistryTest, UnknownNameListsTheRegisteredOnes) {
  std::string known;
  for (const auto& name : registered_names()) known += (known.empty() ? "" : ", ") + name;
  const std::string expected = "unknown backend 'gloo'; this build has: " + known;

  auto found = find_backend("gloo");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(found.status().message(), expected);

  MemoryStore store;
  BackendContext ctx;
  ctx.store = &store;
  auto created = create_backend("gloo", ctx);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(created.status().message(), expected);
  // Names are exact: no case folding, no prefixes.
  EXPECT_FALSE(find_backend("TCP").ok());
  EXPECT_FALSE(find_backend("").ok());
}

// Every backend, whole job or sub-group, is refused an op timeout that would make every wait
// expire at once, before its factory connects anything (so with no store and no peers here).
TEST(RegistryTest, ANonPositiveOpTimeoutIsRefusedNamingTheBackend) {
  for (const BackendEntry& entry : registered_backends()) {
    BackendContext ctx;
    ctx.op_timeout = std::chrono::milliseconds(0);
    for (const Result<std::unique_ptr<Backend>>& made :
         {create_backend(entry.name, ctx), create_subgroup_backend(entry.name, ctx, {0})}) {
      ASSERT_FALSE(made.ok()) << entry.name;
      EXPECT_EQ(made.status().to_string(), "InvalidArgument: backend " + std::string(entry.name) +
                                               ": context.op_timeout must be > 0 ms, got 0");
    }
  }
}

TEST(RegistryTest, CreatedTcpBackendsConnectAndAgreeWithTheirEntry) {
  MemoryStore store;
  std::vector<std::unique_ptr<Backend>> backends(2);
  std::vector<Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      BackendContext ctx;
      ctx.rank = r;
      ctx.size = 2;
      ctx.local_size = 2;
      ctx.store = &store;
      ctx.secret = "registry-test";
      auto b = create_backend("tcp", ctx);
      if (!b.ok()) {
        status[r] = b.status();
        return;
      }
      backends[r] = std::move(*b);
      std::vector<float> v(3, r + 1.0f);
      status[r] = backends[r]->allreduce(v.data(), v.data(), 3, DataType::kFloat32, {});
      if (status[r].ok() && v != std::vector<float>(3, 3.0f))
        status[r] = Status::Internal("wrong sum");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r].to_string();
    EXPECT_EQ(backends[r]->name(), "tcp");
    EXPECT_EQ(backends[r]->rank(), r);
    EXPECT_TRUE(backends[r]->supports(Device::cpu()));
    EXPECT_FALSE(backends[r]->supports(Device::cuda(0)));
  }
}

TEST(RegistryTest, CheckDevicesNamesTheDisagreement) {
  std::unique_ptr<Backend> local = make_local_backend("local");
  BackendEntry entry;
  entry.name = "local";
  EXPECT_TRUE(check_devices(entry, *local).ok());
  entry.devices = {DeviceKind::kCpu, DeviceKind::kCuda};
  Status st = check_devices(entry, *local);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_EQ(st.message(),
            "backend local: supports(cuda:0) is false but its registry entry lists devices: "
            "cpu, cuda:0");
  entry.devices = {};
  EXPECT_EQ(check_devices(entry, *local).message(),
            "backend local: supports(cpu) is true but its registry entry lists devices: none");
}

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.push_back({name, old != nullptr, old ? old : ""});
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had)
        setenv(it->name.c_str(), it->value.c_str(), 1);
      else
        unsetenv(it->name.c_str());
    }
  }

 private:
  struct Saved {
    std::string name;
    bool had;
    std::string value;
  };
  std::vector<Saved> saved_;
};

TEST(RegistryTest, WithoutALauncherTheJobIsOneRankOnTheFirstBackendThatFits) {
  ScopedEnv env;
  for (const char* v :
       {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE", "KOLO_CROSS_RANK",
        "KOLO_CROSS_SIZE", "KOLO_STORE_ADDR", "KOLO_SECRET", "OMPI_COMM_WORLD_SIZE"})
    env.set(v, nullptr);
  auto launched = launched_world();
  ASSERT_TRUE(launched.ok()) << launched.status().to_string();
  EXPECT_EQ(launched->launcher, "none");
  EXPECT_EQ(launched->default_backend, "tcp");
  EXPECT_EQ(launched->world.rank, 0);
  EXPECT_EQ(launched->world.size, 1);
  EXPECT_NE(launched->world.store, nullptr);
}

TEST(RegistryTest, KolorunsEnvironmentComesBeforeOtherLaunchers) {
  ScopedEnv env;
  env.set("KOLO_RANK", "0");
  env.set("KOLO_SIZE", "1");
  // As if mpirun had started kolorun: kolorun's own variables still decide, and mpirun's
  // launcher (in builds with MPI) is not asked.
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  auto launched = launched_world();
  ASSERT_TRUE(launched.ok()) << launched.status().to_string();
  EXPECT_EQ(launched->launcher, "kolorun");
  EXPECT_EQ(launched->default_backend, "tcp");
  EXPECT_EQ(launched->world.size, 1);
}

// shm is the default exactly when several ranks share one host.
TEST(RegistryTest, ShmIsTheDefaultWhenEveryRankIsOnOneHost) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, "s");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  for (const auto& [local_size, expected] :
       std::vector<std::pair<const char*, const char*>>{{"2", "shm"}, {"1", "tcp"}}) {
    ScopedEnv env;
    env.set("KOLO_RANK", "1");
    env.set("KOLO_SIZE", "2");
    env.set("KOLO_LOCAL_RANK", "0");
    env.set("KOLO_LOCAL_SIZE", local_size);
    env.set("KOLO_CROSS_RANK", local_size[0] == '2' ? "0" : "1");
    env.set("KOLO_CROSS_SIZE", local_size[0] == '2' ? "1" : "2");
    env.set("KOLO_STORE_ADDR", (*server)->address().c_str());
    env.set("KOLO_SECRET", "s");
    auto launched = launched_world();
    ASSERT_TRUE(launched.ok()) << launched.status().to_string();
    EXPECT_EQ(launched->default_backend, expected) << "local size " << local_size;
  }
}

TEST(RegistryTest, KolorunsBadEnvironmentIsReported) {
  ScopedEnv env;
  env.set("KOLO_RANK", "abc");
  env.set("KOLO_SIZE", "2");
  auto launched = launched_world();
  ASSERT_FALSE(launched.ok());
  EXPECT_EQ(launched.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(launched.status().message().find("KOLO_RANK=abc"), std::string::npos)
      << launched.status().to_string();
}

}  // namespace
}  // namespace kolo
