// Kolo's public core API: initialise, ask the topology, run collectives on named tensors.
//
//   KOLO_RETURN_IF_ERROR(kolo::init());
//   kolo::Handle h = kolo::allreduce_async("grad.fc1.w", kolo::view_of(g.data(), {256, 64}));
//   ...
//   KOLO_RETURN_IF_ERROR(h.wait());
//
// Conventions shared by every operation:
// - Names. Every operation has a name, its identity across ranks: each rank submits the same
//   name with consistent arguments, in any order and from any thread. Kolo's background
//   thread negotiates which names every rank has submitted and runs them in the same order
//   everywhere. A name may be reused once its previous operation has completed; submitting a
//   name that is still in flight on this rank fails that submission.
// - Errors. The core returns Status; it never throws. A submission that is invalid on this
//   rank (bad view, before init, after shutdown, duplicate name) returns a Handle that has
//   already failed with a message naming the argument. Disagreement between ranks (shape,
//   dtype, op, root, device, scale factors) fails the operation on every rank with a Mismatch
//   naming the tensor, the ranks and what differs. A dead peer or broken connection fails
//   every pending and later operation with PeerFailure/IoError within KOLO_OP_TIMEOUT.
// - Memory. Views are borrowed until the Handle completes.
// - Devices. A view may live on a CUDA device (TensorView::device, with an optional ready
//   event that Kolo orders its reads after). Until a GPU backend exists, such tensors are
//   staged through pinned host memory for the CPU backend; the Handle completes once the
//   result is back in device memory. Ranks must agree on the device kind (cpu or cuda), not on
//   the ordinal. For a CUDA input, an OutputAllocator must return memory on the input's
//   device; without an allocator the output is a HostTensor in host memory. In a build without
//   CUDA, a CUDA view fails with Unsupported naming the tensor and device.
// - Thread-safety. Every function may be called from any thread after init().
//
// Configuration is read from KOLO_* environment variables, every one validated at init(): the
// registry in common/knob_table.cc declares them (README's "Configuration" table is generated
// from it; `kolorun --print-config` shows the values). KOLO_TIMELINE=path writes one Chrome
// trace per rank: "{rank}" in the path is replaced by the rank, else jobs of several ranks
// write "<stem>.rank<N>.json" for a path ending in .json and "<path>.rank<N>" otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kolo/grouped_handle.h"
#include "kolo/handle.h"
#include "kolo/process_set.h"
#include "kolo/status.h"
#include "kolo/tensor.h"
#include "kolo/types.h"

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo {

// ---- Lifecycle -------------------------------------------------------------------------------

// Joins the job and starts the background thread. The world comes from kolorun's environment
// (KOLO_RANK, ...), else from MPI when launched by mpirun in a build with MPI, else it is a
// single rank. Which backend runs: KOLO_CPU_OPERATIONS when set (any backend of this build),
// else "shm" when every rank is on one host, "tcp" across hosts, "mpi" under mpirun; CUDA
// tensors go to "nccl" when the build has it and every rank of the host can have a GPU of its
// own, else through host memory to the CPU backend (KOLO_GPU_OPERATIONS overrides). The rule is
// the registry's (backends/registry.h); `kolorun --print-config -np N` shows a job's choice
// and why. Errors: an invalid KOLO_* variable or a retired name (named, with the value and the
// accepted form; before any connection), rendezvous or connection failures. At KOLO_LOG_LEVEL=info
// rank 0 logs each variable the environment set. PreconditionFailed when already initialised.
// init() after shutdown() starts a new session.
Status init();
// Completes every pending operation of this rank with Aborted, tells the other ranks (their
// pending operations fail too, naming this rank), stops the background thread and closes
// the connections. Idempotent; OK when not initialised.
Status shutdown();
bool is_initialized();

// Topology. Before init() these return rank 0 of a world of size 1.
int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();

// Whether this job runs in deterministic mode (KOLO_DETERMINISTIC=1, kolorun --deterministic;
// docs/determinism.md): the same on every rank, fixed at init(). false before init. Training
// stacks read it after init() to make their own kernels reproducible too (the framework's
// fw::configure_deterministic_kernels()).
bool deterministic();

// Starts/stops recording a Chrome trace of this rank's operations to `path`, with the file
// rule of KOLO_TIMELINE (which does the same at init()): "{rank}" in the path is replaced by
// the rank, else jobs of several ranks write "<stem>.rank<N>.json" (or "<path>.rank<N>" for a
// path not ending in .json), so every rank may pass the same path. `mark_cycles` adds a marker
// per background cycle; by default, as KOLO_TIMELINE_MARK_CYCLES says. PreconditionFailed
// before init or when already recording.
Status start_timeline(const std::string& path, std::optional<bool> mark_cycles = std::nullopt);
Status stop_timeline();

// Marks the end of one training step on this rank. Kolo's step-based features (the autotuner,
// timeline recording windows) count steps through this call; DistributedOptimizer::step()
// makes it, so only programs with their own optimizer loop need to. Every rank should mark
// the same number of steps. Cheap (no communication); thread-safe. PreconditionFailed before
// init.
Status mark_step();
// The number of steps this rank has marked since init(); 0 before init.
int64_t steps_marked();

// ---- Autotuning (KOLO_AUTOTUNE=1, or kolorun --autotune) ----------------------------------------
// The gradient bucket size the autotuner chose for the step that follows steps_marked() steps:
// the same value on every rank at the same step. nullopt before its first change, without the
// autotuner, or before init. DistributedOptimizer reads it between steps; programs that bucket
// their own gradients may too. Thread-safe.
std::optional<int64_t> tuned_bucket_bytes();
// One configuration the autotuner applied on this rank. Every rank applies the same ones, in the
// same background cycles.
struct AppliedTuning {
  int64_t cycle = 0;      // the background cycle in which fusion threshold and cycle time changed
  int64_t from_step = 0;  // the first step (counted as steps_marked()) with this bucket size
  uint64_t fusion_threshold = 0;  // bytes
  int64_t cycle_time_ns = 0;
  int64_t bucket_bytes = 0;
  // Allreduces run hierarchically from `cycle` on (KOLO_HIERARCHICAL_ALLREDUCE, which the
  // autotuner switches in a job of several hosts of equal rank counts that left it unset);
  // false where the job has no hierarchy.
  bool hierarchical_allreduce = false;
};
// Every configuration applied since init(), in order; empty before init. Thread-safe. Read
// between steps, its last entry may be a decision for a step still ahead that has reached this
// rank but not yet another (rank 0's tuner decides between steps): the ranks agree only on the
// entries in effect, which the overload below returns.
std::vector<AppliedTuning> autotune_history();
// The configurations in effect by step `through_step` (from_step <= through_step), in order.
// Identical on every rank that has marked at least through_step steps, so
// autotune_history(steps_marked()) is what every rank agrees on at the same step (issue 30).
// Needs a collective of every rank in each step, as tuned_bucket_bytes() does.
std::vector<AppliedTuning> autotune_history(int64_t through_step);

// ---- Operation options -------------------------------------------------------------------------
// One type per concept. The Reduction inside allreduce and reducescatter options is the very
// type the Backend interface and the ops/ algorithms take, so nothing converts between
// copies; the other options are about tensors (rows, output memory), from which Kolo derives
// the per-rank element counts that backends take. Designated initializers read well:
// allreduce_async(name, view, {.reduction = {.op = kolo::ReduceOp::kAverage}}). Every member
// has a default initializer, so that designated initializers that leave some out compile
// without -Wmissing-field-initializers warnings.

// Every options struct ends with the process set the operation runs on (kolo/process_set.h);
// the default is the global set. E.g. {.reduction = {.op = kolo::ReduceOp::kAverage},
// .process_set = group}.
// Operations without an options struct (barrier, grouped gathers, objects, point-to-point,
// and the blocking allgather, broadcast and alltoall) take the process set as their last
// argument, with the same default.

namespace detail {

// One member of 0.2's flat spelling of AllreduceOptions (below). It reads and writes as the
// value it holds, so that 0.2's programs compile, every such use warning as deprecated; and it
// records whether the program set it, so that effective_reduction() can tell which spelling the
// program used. Kolo reads it through set() and value(), which do not warn. Deprecated in 0.3,
// to be removed in 0.4 with the flat members.
template <typename T>
class LegacyReductionField {
 public:
  struct Unset {};
  constexpr LegacyReductionField(Unset, T initial) : value_(initial) {}

  // Implicit, as 0.2's plain member was: {.op = kolo::ReduceOp::kAverage}.
  [[deprecated("use AllreduceOptions::reduction")]] constexpr LegacyReductionField(T value)
      : value_(value), set_(true) {}
  [[deprecated("use AllreduceOptions::reduction")]] constexpr LegacyReductionField& operator=(
      T value) {
    value_ = value;
    set_ = true;
    return *this;
  }
  [[deprecated("use AllreduceOptions::reduction")]] constexpr operator T() const { return value_; }

  constexpr bool set() const { return set_; }
  constexpr T value() const { return value_; }

 private:
  T value_;
  bool set_ = false;
};

}  // namespace detail

// An allreduce is described by its reduction and its process set:
//   allreduce_async(name, view, {.reduction = {.op = kolo::ReduceOp::kAverage}});
//
// Deprecated in 0.3, to be removed in 0.4: 0.2's flat spelling, which repeated the reduction's
// members op, prescale and postscale here. Programs written against 0.2 still compile, with
// deprecation warnings: {.op = kolo::ReduceOp::kAverage, .process_set = ps} (the flat members
// sit between `reduction` and `process_set`, in 0.2's order), `opts.prescale = 0.5;`, and reads
// such as `opts.op == kolo::ReduceOp::kSum`. 0.2's accessor opts.reduction() does not compile:
// a member function cannot share the name of the member `reduction`; effective_reduction(opts)
// replaces it. The flat members count when the program set any of them (to any value, the
// default included), else `reduction` does. Setting both spellings to different reductions
// fails the operation at submission with InvalidArgument naming both (effective_reduction).
struct AllreduceOptions {
  Reduction reduction = {};
  detail::LegacyReductionField<ReduceOp> op{{}, ReduceOp::kSum};
  detail::LegacyReductionField<double> prescale{{}, 1.0};
  detail::LegacyReductionField<double> postscale{{}, 1.0};
  ProcessSet process_set = {};
};

// The reduction `opts` asks for: that of its flat members when any is set, else opts.reduction
// (a `reduction` left at its default does not count as set). For code handed options that may
// be in either spelling (the torch plugin's reducescatter); Kolo's allreduces call it at
// submission. InvalidArgument naming both spellings and their values when both are set and
// differ. Deprecated in 0.4 (opts.reduction is then the answer), removed in 0.5. Thread-safe.
Result<Reduction> effective_reduction(const AllreduceOptions& opts);

// Called with the output's shape once it is known, on the thread that runs the cycle: Kolo's
// background thread, or a thread of this rank waiting in a blocking call below; must return a
// buffer of at least product(shape) * dtype_size(dtype) bytes that stays valid until the
// Handle completes, or null (the operation then fails with InvalidArgument).
using OutputAllocator = std::function<void*(const std::vector<int64_t>& shape, DataType dtype)>;

struct AllgatherOptions {
  OutputAllocator allocator = {};  // empty: Kolo allocates a HostTensor (Handle::take_output)
  ProcessSet process_set = {};
};

struct BroadcastOptions {
  int root = 0;  // a rank of the process set
  ProcessSet process_set = {};
};

struct AlltoallOptions {
  // Rows (first-dimension slices) sent to each rank, size() entries summing to shape[0].
  // Empty: shape[0] must divide evenly by size() and every rank gets the same number.
  std::vector<int64_t> splits = {};
  OutputAllocator allocator = {};
  ProcessSet process_set = {};
};

// The first dimension is split across ranks in order: rank r receives shape[0] / size() rows,
// plus one when r < shape[0] % size(), unless recv_counts says otherwise.
// E.g. {.reduction = {.op = kolo::ReduceOp::kAverage}}.
struct ReducescatterOptions {
  Reduction reduction = {};
  OutputAllocator allocator = {};
  // Rows (first-dimension slices) that each rank receives: size() entries, each >= 0, summing
  // to shape[0] (InvalidArgument naming the entry or the sum otherwise). Every rank passes the
  // same list (Mismatch naming the ranks otherwise). Empty: the even split above.
  std::vector<int64_t> recv_counts = {};
  ProcessSet process_set = {};
};

// ---- Asynchronous operations ------------------------------------------------------------------

// In-place allreduce of `tensor`.
Handle allreduce_async(std::string name, TensorView tensor, AllreduceOptions opts = {});
// Out-of-place: `output` must have the shape, dtype and device of `input`.
Handle allreduce_async(std::string name, TensorView input, TensorView output,
                       AllreduceOptions opts = {});
// Allreduces a list of tensors (in place) as one unit: negotiated together and executed in
// one fused step, whatever the fusion threshold. Every rank passes the same number of
// tensors with matching shapes. The member tensors are named "<name>[i]" in messages.
Handle grouped_allreduce_async(std::string name, std::vector<TensorView> tensors,
                               AllreduceOptions opts = {});
// Concatenates every rank's `input` along the first dimension, in rank order. The first
// dimension may differ between ranks; the others must agree.
Handle allgather_async(std::string name, TensorView input, AllgatherOptions opts = {});
// Copies root's `tensor` into `tensor` on every other rank.
Handle broadcast_async(std::string name, TensorView tensor, BroadcastOptions opts = {});
// Sends opts.splits[j] rows of `input` to rank j; the output concatenates the rows received
// from each rank in rank order (Handle::received_splits tells how many came from each).
Handle alltoall_async(std::string name, TensorView input, AlltoallOptions opts = {});
// Reduces `input` (the same shape on every rank) and leaves rank r's share of the first
// dimension in the output.
Handle reducescatter_async(std::string name, TensorView input, ReducescatterOptions opts = {});
// Allgathers a list of tensors as one unit: negotiated together and executed as one allgather,
// whatever the fusion threshold. Each member is gathered as allgather_async would (its first
// dimension may differ between ranks, the others must agree); wait() returns the outputs in
// the order of `tensors`. Every rank passes the same number of tensors; a rank that passes a
// different count, dtype or trailing shape fails the group on every rank with Mismatch naming
// the group ("<name>[i]" for a member) and the ranks. CPU tensors only (Unsupported naming the
// member otherwise). The members are copied at submission: they may change once this returns.
GroupedHandle grouped_allgather_async(std::string name, std::vector<TensorView> tensors,
                                      const ProcessSet& process_set = {});
// Reducescatters a list of tensors as one unit (one reducescatter of their concatenation).
// Each member is split across ranks as reducescatter_async splits it (evenly, by rows); wait()
// returns this rank's share of each, in the order of `tensors`. The members share one dtype
// (InvalidArgument naming the member otherwise). Every rank passes the same shapes (Mismatch
// naming the group and the ranks otherwise). CPU tensors only, copied at submission.
GroupedHandle grouped_reducescatter_async(std::string name, std::vector<TensorView> tensors,
                                          Reduction reduction = {},
                                          const ProcessSet& process_set = {});
// Completes once every rank (of the set) has submitted a barrier of this name.
Handle barrier_async(std::string name = "barrier");
Handle barrier_async(std::string name, const ProcessSet& process_set);
// Declares that this rank has no more data for now: until every rank has joined, the other
// ranks' allreduces and barriers proceed without waiting for this rank, which contributes the
// operation's identity (0 for sum and average, 1 for product, +max/-max for min/max), as in
// Horovod. kAverage divides by every rank, joined ones included (Horovod's: 75 averaged over
// two ranks, one joined, is 37). Completes when all ranks have joined; then
// Handle::last_joined_rank() is the rank that joined last (the same on every rank; among ranks
// whose joins reached the coordinator in the same cycle, the highest). This rank may not
// submit other operations until then (InvalidArgument). Allgather, broadcast, alltoall and
// reducescatter fail with Mismatch ("cannot run while rank R has joined") on the ranks that
// submitted them while a rank that did not submit them has joined.
// Join is about the global set only.
Handle join_async();

// ---- Point-to-point (Note [Point-to-point] in docs/architecture.md) -------------------------
// Sends `tensor` to rank `dst`, which receives it with recv_async under the same name into a
// tensor of the same shape and dtype; for pipeline parallelism (activations forward,
// gradients back). `dst` and `src` are ranks of `process_set` (the global set by default).
// Only the two ranks negotiate: their first send or recv to each other connects them (on a
// thread of Kolo's: these calls never block), later ones reuse the connection. Names are per
// pair of ranks: one name may be in flight to two peers at once, but between two ranks it
// names one transfer at a time. Transfers between the same two ranks may complete in any
// order; those with other peers, and collectives, run concurrently.
// Errors: InvalidArgument, the Handle failing at once, when `dst`/`src` is this rank or not a
// rank of the set (naming it), or this rank is not in the set; Mismatch on both ranks, naming
// the tensor and both ranks' values, when the recv's shape or dtype differs from the send's or
// both ranks send (or both receive) the name; Aborted when either rank shuts down first.
Handle send_async(std::string name, TensorView tensor, int dst, const ProcessSet& process_set = {});
// Receives into `tensor` what rank `src` sends under `name` (see send_async).
Handle recv_async(std::string name, TensorView tensor, int src, const ProcessSet& process_set = {});

// ---- Blocking wrappers (submit and wait; same errors as the Handle's) -----------------------
// allreduce, grouped_allreduce, broadcast and barrier run the coordination on the calling thread
// while it waits, when no other thread runs it (no hand-off to the background thread, which
// costs a context switch where a rank has one CPU); callbacks still run on the background
// thread. Operations on CUDA tensors leave it to the background thread.

Status allreduce(std::string name, TensorView tensor, AllreduceOptions opts = {});
Status allreduce(std::string name, TensorView input, TensorView output, AllreduceOptions opts = {});
Status grouped_allreduce(std::string name, std::vector<TensorView> tensors,
                         AllreduceOptions opts = {});
Result<HostTensor> allgather(std::string name, TensorView input,
                             const ProcessSet& process_set = {});
Status broadcast(std::string name, TensorView tensor, int root = 0,
                 const ProcessSet& process_set = {});
// The received rows and how many came from each rank (Handle::received_splits).
struct AlltoallResult {
  HostTensor output;
  std::vector<int64_t> received_splits;
};
Result<AlltoallResult> alltoall(std::string name, TensorView input,
                                std::vector<int64_t> splits = {},
                                const ProcessSet& process_set = {});
Result<HostTensor> reducescatter(std::string name, TensorView input,
                                 ReducescatterOptions opts = {});
Result<std::vector<HostTensor>> grouped_allgather(std::string name, std::vector<TensorView> tensors,
                                                  const ProcessSet& process_set = {});
Result<std::vector<HostTensor>> grouped_reducescatter(std::string name,
                                                      std::vector<TensorView> tensors,
                                                      Reduction reduction = {},
                                                      const ProcessSet& process_set = {});
Status barrier(std::string name = "barrier");
Status barrier(std::string name, const ProcessSet& process_set);
// The rank that joined last (Handle::last_joined_rank).
Result<int> join();
Status send(std::string name, TensorView tensor, int dst, const ProcessSet& process_set = {});
Status recv(std::string name, TensorView tensor, int src, const ProcessSet& process_set = {});

// ---- Objects: byte strings of any size (coordinator/objects.cc) ------------------------------
// Built on the collectives above, so they negotiate, fail and time out like them; blocking.
// Every rank (of the process set) calls them with the same name. Names: `name` itself and
// "<name>.size" are used (broadcast_object), so neither may be in flight at the same time on this
// rank.

// Returns root's `bytes` on every rank (root's own included): first the size (one int64), then
// the bytes. Only root's `bytes` are read. `root` is a rank of the set; InvalidArgument when it
// is not.
Result<std::string> broadcast_object(std::string name, const std::string& bytes, int root = 0,
                                     const ProcessSet& process_set = {});
// Returns every rank's `bytes`, in rank order (one allgather of length-prefixed blocks).
Result<std::vector<std::string>> allgather_object(std::string name, const std::string& bytes,
                                                  const ProcessSet& process_set = {});

// ---- Build queries ------------------------------------------------------------------------------
// Backends are named as KOLO_CPU_OPERATIONS and KOLO_GPU_OPERATIONS name them, which is the name
// of their folder of backends/: "tcp", "shm", "mpi", "nccl". Both queries read the registry
// (backends/registry.h), so a new backend answers here without a change to this header. Callable
// before init() and from any thread.

// Whether this build has the backend named `backend`, e.g. kolo::built("nccl"). False for a
// name that is no backend of this build, known or not.
bool built(std::string_view backend);
// The backends of this build, in the registry's order of preference (backends/registry.cc), e.g.
// {"shm", "tcp", "mpi", "nccl"}. Never empty: every build has tcp.
std::vector<std::string> built_backend_names();
// Whether MPI's multithreading (MPI_THREAD_MULTIPLE) is available to Kolo. Kolo initialises MPI
// with MPI_THREAD_MULTIPLE and refuses a lower level, so this is true exactly when the build has
// the mpi backend. Callable before init().
bool mpi_threads_supported();

// Deprecated in 0.3, to be removed in 0.4: 0.2's enum of backends. Naming backends by string
// means that adding one touches its folder and its registry line only; these stay for one
// release so that programs written against 0.2 still compile and get the same answers
// (coordinator/deprecated_api_test.cc).
// (clang-format 14 takes an attributed enum's body for a braced initialiser.)
// clang-format off
enum class [[deprecated("use kolo::built(\"shm\")")]] BackendKind : uint8_t {
  kTcp, kShm, kMpi, kNccl
};
// clang-format on
// "tcp", "shm", "mpi", "nccl".
[[deprecated("use the backend's name: kolo::built(\"shm\")")]] std::string_view backend_kind_name(
    BackendKind kind);
// built(backend_kind_name(kind)).
[[deprecated("use kolo::built(\"shm\")")]] bool built(BackendKind kind);

}  // namespace kolo
#pragma GCC visibility pop
