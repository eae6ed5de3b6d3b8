// The registry: its names are the build's, lookups fail naming what exists, created backends
// agree with their entries, and the job's launcher is found in the documented order.
#include "backends/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
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
  if (auto mpi = find_backend("mpi"); mpi.ok()) {  // builds with MPI
    EXPECT_EQ((*mpi)->launcher.name, "mpirun");
    EXPECT_TRUE((*mpi)->launcher.default_backend);
  }
  // The default for CUDA tensors takes them: it is a device backend.
  for (const auto& e : registered_backends())
    if (e.default_for_cuda) EXPECT_TRUE(e.handles(Device::cuda(0))) << e.name;
}

// Without KOLO_GPU_OPERATIONS, CUDA tensors go to the first entry marked default_for_cuda
// (nccl in builds with NCCL), and only where each rank of the host can have a GPU of its own.
TEST(RegistryTest, TheDefaultForCudaTensorsIsTheEntryMarkedSo) {
  std::string marked;
  for (const auto& e : registered_backends())
    if (e.default_for_cuda && marked.empty()) marked = e.name;
  EXPECT_EQ(gpu_backend_choice("", 2, 2).value(), marked);
  EXPECT_EQ(gpu_backend_choice("", 1, 1, /*gpu_per_process=*/true).value(), marked);
  EXPECT_EQ(gpu_backend_choice("", 0, 1).value(), "");
  EXPECT_EQ(gpu_backend_choice("", 2, 4).value(), "");  // more ranks than GPUs: staged
  EXPECT_EQ(gpu_backend_choice("tcp", 0).value(), "tcp");
  EXPECT_EQ(gpu_backend_choice("gloo", 1).status().message(),
            "KOLO_GPU_OPERATIONS=gloo: " + find_backend("gloo").status().message());
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
  ctx.knobs = &KnobSet::defaults();
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
    ctx.knobs = &KnobSet::defaults();
    ctx.op_timeout = std::chrono::milliseconds(0);
    for (const Result<std::unique_ptr<Backend>>& made :
         {create_backend(entry.name, ctx), create_subgroup_backend(entry.name, ctx, {0})}) {
      ASSERT_FALSE(made.ok()) << entry.name;
      EXPECT_EQ(made.status().to_string(), "InvalidArgument: backend " + std::string(entry.name) +
                                               ": context.op_timeout must be > 0 ms, got 0");
    }
  }
}

// Likewise a connect timeout: every wait for the backend's peers would expire at once. The
// message names the knob it comes from.
TEST(RegistryTest, ANonPositiveConnectTimeoutIsRefusedNamingTheBackendAndTheKnob) {
  for (const BackendEntry& entry : registered_backends()) {
    BackendContext ctx;
    ctx.knobs = &KnobSet::defaults();
    ctx.op_timeout = std::chrono::milliseconds(1000);
    for (const Result<std::unique_ptr<Backend>>& made :
         {create_backend(entry.name, ctx), create_subgroup_backend(entry.name, ctx, {0})}) {
      ASSERT_FALSE(made.ok()) << entry.name;
      EXPECT_EQ(made.status().to_string(),
                "InvalidArgument: backend " + std::string(entry.name) +
                    ": context.connect_timeout must be > 0 ms, got 0 (KOLO_RENDEZVOUS_TIMEOUT; "
                    "backend_context() sets it)");
    }
  }
}

// Every backend reads its options from the job's knobs, so a context without them is refused
// before any factory runs, naming the backend.
TEST(RegistryTest, AContextWithoutKnobsIsRefusedNamingTheBackend) {
  for (const BackendEntry& entry : registered_backends()) {
    BackendContext ctx;
    ctx.op_timeout = std::chrono::milliseconds(1000);
    for (const Result<std::unique_ptr<Backend>>& made :
         {create_backend(entry.name, ctx), create_subgroup_backend(entry.name, ctx, {0})}) {
      ASSERT_FALSE(made.ok()) << entry.name;
      EXPECT_EQ(made.status().to_string(),
                "InvalidArgument: backend " + std::string(entry.name) +
                    ": context.knobs is not set (the KnobSet that kolo::init() parsed; "
                    "backend_context() sets it)");
    }
  }
}

// backend_context() takes the world's topology, store and secret, and the op and connect
// timeouts from the knobs it hands down (rounded up to whole milliseconds, never to 0).
TEST(RegistryTest, BackendContextCarriesTheJobsKnobs) {
  World world;
  world.rank = 1;
  world.size = 3;
  world.local_size = 3;
  world.store = std::make_unique<MemoryStore>();
  world.secret = "s";
  Result<KnobSet> knobs =
      KnobSet::read({{"KOLO_OP_TIMEOUT", "1500us"}, {"KOLO_RENDEZVOUS_TIMEOUT", "2500us"}});
  ASSERT_TRUE(knobs.ok());
  const BackendContext ctx = backend_context(world, *knobs, "p");
  EXPECT_EQ(ctx.knobs, &*knobs);
  EXPECT_EQ(ctx.op_timeout, std::chrono::milliseconds(2));
  EXPECT_EQ(ctx.connect_timeout, std::chrono::milliseconds(3));
  EXPECT_EQ(ctx.rank, 1);
  EXPECT_EQ(ctx.size, 3);
  EXPECT_EQ(ctx.local_size, 3);
  EXPECT_EQ(ctx.store, world.store.get());
  EXPECT_EQ(ctx.secret, "s");
  EXPECT_EQ(ctx.store_prefix, "p");
  EXPECT_EQ(backend_context(world, KnobSet::defaults(), "p").op_timeout,
            KnobSet::defaults().duration(KnobId::kOpTimeout));
  EXPECT_EQ(backend_context(world, KnobSet::defaults(), "p").connect_timeout,
            std::chrono::minutes(5));  // the registry row's default
}

TEST(RegistryTest, CreatedTcpBackendsConnectAndAgreeWithTheirEntry) {
  MemoryStore store;
  std::vector<std::unique_ptr<Backend>> backends(2);
  std::vector<Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      World world;
      world.rank = r;
      world.size = 2;
      world.local_size = 2;
      world.secret = "registry-test";
      BackendContext ctx = backend_context(world, KnobSet::defaults(), "kolo");
      ctx.store = &store;
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

// Sets (or unsets) environment variables for one test and restores them after: the launchers
// other than kolorun are detected by their own variables (mpirun's OMPI_COMM_WORLD_SIZE).
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

// The job that knobs read from `env` describe (as init() reads them, once).
Result<LaunchedWorld> launched(const std::map<std::string, std::string>& env) {
  KOLO_ASSIGN_OR_RETURN(KnobSet knobs, KnobSet::read(env));
  return launched_world(knobs);
}

TEST(RegistryTest, WithoutALauncherTheJobIsOneRankOnTheFirstBackendThatFits) {
  ScopedEnv env;
  env.set("OMPI_COMM_WORLD_SIZE", nullptr);
  auto l = launched({});
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->launcher, "none");
  EXPECT_EQ(l->default_backend, "tcp");
  EXPECT_EQ(l->world.rank, 0);
  EXPECT_EQ(l->world.size, 1);
  EXPECT_NE(l->world.store, nullptr);
}

TEST(RegistryTest, KolorunsKnobsComeBeforeOtherLaunchers) {
  ScopedEnv env;
  // As if mpirun had started kolorun: kolorun's own variables still decide, and mpirun's
  // launcher (in builds with MPI) is not asked.
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  auto l = launched({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}});
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->launcher, "kolorun");
  EXPECT_EQ(l->default_backend, "tcp");
  EXPECT_EQ(l->world.size, 1);
}

// shm is the default exactly when several ranks share one host.
TEST(RegistryTest, ShmIsTheDefaultWhenEveryRankIsOnOneHost) {
  auto server = TcpStoreServer::start("127.0.0.1", 0, "s");
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  for (const auto& [local_size, expected] :
       std::vector<std::pair<std::string, std::string>>{{"2", "shm"}, {"1", "tcp"}}) {
    auto l = launched({{"KOLO_RANK", "1"},
                       {"KOLO_SIZE", "2"},
                       {"KOLO_LOCAL_RANK", "0"},
                       {"KOLO_LOCAL_SIZE", local_size},
                       {"KOLO_CROSS_RANK", local_size == "2" ? "0" : "1"},
                       {"KOLO_CROSS_SIZE", local_size == "2" ? "1" : "2"},
                       {"KOLO_STORE_ADDR", (*server)->address()},
                       {"KOLO_SECRET", "s"}});
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    EXPECT_EQ(l->default_backend, expected) << "local size " << local_size;
  }
}

// A bad launcher value in the environment is init()'s one parse's error: launched_world never
// sees it. One that parses but does not fit the job is launched_world's.
TEST(RegistryTest, KolorunsBadKnobsAreReported) {
  auto l = launched({{"KOLO_RANK", "abc"}, {"KOLO_SIZE", "2"}});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(l.status().message(), "KOLO_RANK=abc is invalid: expected an integer >= 0");
  l = launched({{"KOLO_RANK", "2"}, {"KOLO_SIZE", "2"}});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().message(),
            "KOLO_RANK=2 is invalid: expected an integer in [0, KOLO_SIZE=2)");
}

}  // namespace
}  // namespace kolo
