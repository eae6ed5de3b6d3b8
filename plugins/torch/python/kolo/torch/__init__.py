"""kolo.torch: Kolo for PyTorch with horovod.torch's API.

    import kolo.torch as hvd          # the only line a Horovod script changes
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Launch with ``kolorun -np 2 /usr/bin/python3 train.py``. The collectives are the C++ plugin's
(kolo/torch.h), bound in _kolo_torch; handles are integers as in Horovod (poll, synchronize).
Errors raise KoloError (a RuntimeError) carrying Kolo's message, which names the tensor, the ranks
and what differs. Names: as in Horovod, an operation without a name gets "<op>.noname.<n>" from
a per-process counter, so every rank must call unnamed operations in the same order.

Process sets are horovod.torch's: add_process_set(ranks) (collective: every rank calls it, in the
same order), remove_process_set, global_process_set, ProcessSet.rank()/size()/included()/ranks,
and the process_set argument of every collective and of DistributedOptimizer. A broadcast's
root_rank is a GLOBAL rank, a member of the set, as in Horovod (Kolo's C++ API, kolo/torch.h, takes
the rank within the set: kolo.torch translates).

The out-of-place collectives are differentiable with Horovod's gradients (Note [Collective
gradients]); the build queries (mpi_built(), nccl_built(), ...) answer from Kolo's registry.

Elastic training is horovod.torch.elastic's API: hvd.elastic.run, hvd.elastic.TorchState and
hvd.elastic.ElasticSampler (kolo/torch/elastic; docs/elastic-torch.md). A lost peer raises
HorovodInternalError and a world the launcher grew raises HostsUpdatedInterrupt, both KoloErrors,
also importable from kolo.common.exceptions as from horovod.common.exceptions.

Beyond Horovod: DistributedOptimizer.set_local_batch_size(n) weights each rank's gradient by its
sample count (Kolo's exact averaging: uneven local batches give the gradient of the union), and
DistributedOptimizer.no_sync() accumulates gradients locally as DDP's no_sync() does.
"""
import contextlib
import io
import os
import itertools
import pickle
import warnings
import weakref

import torch

from . import _kolo_torch as _C
from ._kolo_torch import KoloError  # noqa: F401  (re-exported)
from ._kolo_torch import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from ._kolo_torch import InvalidArgumentError  # noqa: F401  (a KoloError and a ValueError)

Sum = _C.SUM
Average = _C.AVERAGE
Min = _C.MIN
Max = _C.MAX
Product = _C.PRODUCT
Adasum = -1  # Horovod's Adasum: not implemented by Kolo (refused with KoloError)

shutdown = _C.shutdown
is_initialized = _C.is_initialized
rank = _C.rank
size = _C.size
local_rank = _C.local_rank
local_size = _C.local_size
cross_rank = _C.cross_rank
cross_size = _C.cross_size


def init(comm=None, process_sets=None):
    """Joins the job (kolorun's environment). process_sets: ProcessSet objects or rank lists to
    add right away (horovod.torch's static process sets; KOLO_PROCESS_SETS does the same)."""
    if comm is not None:
        raise ValueError("kolo.torch.init: comm (an MPI communicator) is not supported; launch "
                         "with kolorun or mpirun")
    _C.init()
    if process_sets is not None and process_sets != "dynamic":
        for ps in process_sets:
            add_process_set(ps)


# ---- What this build has (horovod.torch's build queries) ----------------------------------------
# Answered from Kolo's backend registry (kolo::built, coordinator/build_queries.cc). Kolo has no
# Gloo, oneCCL, DDL or ROCm backend; CUDA tensors go to the nccl backend when it is built (else they
# are staged through host memory, which Horovod's cuda_built does not describe).

def mpi_threads_supported():
    """True when this build's MPI backend is there (it requires MPI_THREAD_MULTIPLE)."""
    return _C.mpi_threads_supported()


def mpi_built():
    return _C.built("mpi")


def mpi_enabled():
    """True when this job's CPU collectives run on MPI: built, and chosen (KOLO_CPU_OPERATIONS=mpi,
    or launched by mpirun, whose default it is)."""
    if not mpi_built():
        return False
    chosen = os.environ.get("KOLO_CPU_OPERATIONS")
    if chosen is not None:
        return chosen == "mpi"
    return "KOLO_RANK" not in os.environ and ("OMPI_COMM_WORLD_RANK" in os.environ or
                                              "PMI_RANK" in os.environ)


def nccl_built():
    """NCCL's version code (NCCL_VERSION_CODE of the header the nccl backend was built with, e.g.
    22809 for 2.28.9), 0 when this build has no nccl backend (as Horovod)."""
    return _C.NCCL_VERSION_CODE if _C.built("nccl") else 0


def cuda_built():
    return _C.built("nccl")


def gloo_built():
    return False


def gloo_enabled():
    return False


def ccl_built():
    return False


def ddl_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts writing the timeline to file_path (Kolo's timeline, docs/timeline.md)."""
    _C.start_timeline(file_path, mark_cycles)


def stop_timeline():
    _C.stop_timeline()


class Compressor:
    """Compresses a tensor for the wire and restores it (Horovod's interface)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    pass


class FP16Compressor(Compressor):
    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.type(ctx)


class BF16Compressor(FP16Compressor):
    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.bfloat16), tensor.dtype
        return tensor, None


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


# ---- Process sets -----------------------------------------------------------------------------

class ProcessSet:
    """A set of ranks that run collectives together (horovod.torch's ProcessSet). Made from a
    list of global ranks; usable once added with add_process_set (or passed to init)."""

    def __init__(self, ranks):
        self._ranks = sorted(int(r) for r in ranks)
        self._set = None  # the _kolo_torch.ProcessSet once added

    @property
    def process_set_id(self):
        """0 for the global set, 1, 2, ... in the order sets were added; None until added."""
        return None if self._set is None else self._set.id()

    @property
    def ranks(self):
        """The global ranks of the members, ascending."""
        return self._ranks if self._set is None else self._set.ranks()

    def size(self):
        """The number of members; None until added."""
        return None if self._set is None else self._set.size()

    def rank(self):
        """This process's rank within the set (0..size()-1), -1 when not a member; None until
        added."""
        return None if self._set is None else self._set.rank()

    def included(self):
        """Whether this process is a member; None until added."""
        return None if self._set is None else self._set.includes(rank())

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set._set = _C.global_process_set()
_added_sets = weakref.WeakSet()  # the ProcessSets add_process_set returned, for _reform()


def add_process_set(process_set):
    """Adds a set of global ranks (a ProcessSet or a list) and returns it as a ProcessSet.
    Collective: every rank calls it with the same ranks, in the same order relative to other
    add/remove calls. Raises KoloError naming what was wrong (a rank twice or out of range,
    ranks that disagree)."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set._set is not None:
        raise ValueError("%s was added already" % process_set)
    process_set._set = _C.add_process_set(process_set._ranks)
    _added_sets.add(process_set)
    return process_set


def remove_process_set(process_set):
    """Removes a set added with add_process_set (each member should call it); pending
    operations on it fail. Returns False for the global set, which stays (as Horovod)."""
    if process_set._set is None:
        raise ValueError("%s was not added or was removed already" % process_set)
    if process_set._set.id() == 0:
        return False
    _C.remove_process_set(process_set._set)
    _added_sets.discard(process_set)
    process_set._set = None
    return True


def _set_of(process_set):
    """The _kolo_torch.ProcessSet of a process_set argument (None: the global set)."""
    if process_set is None:
        return global_process_set._set
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a kolo.torch.ProcessSet, got %r" % (process_set,))
    if process_set._set is None:
        raise ValueError("%s was not added (add_process_set) or was removed" % process_set)
    return process_set._set


# ---- Handles --------------------------------------------------------------------------------

_handles = {}  # int -> (kolo handle, postprocess(outputs) -> result)
_handle_ids = itertools.count(1)
_noname = itertools.count()


def _name(kind, name):
    return name if name is not None else "%s.noname.%d" % (kind, next(_noname))


def _world_joined():
    """Unnamed operations count from 0 again: a rank that joins a re-formed world and the
    survivors must give the same names to the same calls."""
    global _noname
    _noname = itertools.count()


def _reform():
    """Leaves the current world and joins the next one (kolo::elastic::reform: shutdown, then init
    into the newest generation that names this worker). The old world's handles are dropped:
    their operations failed or can never complete."""
    _handles.clear()
    _C.elastic_reform()
    _world_joined()
    # A set whose members all survived keeps its id with its members renumbered (Note [Elastic
    # process sets] in coordinator/elastic_sets.cc); the objects the program holds take the new
    # numbers, so that their rank(), size() and ranks (a broadcast's global root) are right. A set
    # that lost a member keeps its old object, whose operations fail naming the set.
    current = {s.id(): s for s in _C.process_sets()}
    for ps in list(_added_sets):
        renumbered = current.get(ps._set.id())
        if renumbered is not None:
            ps._set, ps._ranks = renumbered, renumbered.ranks()


def _op(op, average):
    if average is not None:
        if op is not None:
            raise ValueError("op and average are exclusive")
        return Average if average else Sum
    op = Average if op is None else op
    if op == Adasum:
        raise KoloError("Unsupported: Kolo has no Adasum reduction (use Average or Sum)")
    return op


def _register(handle, post):
    hid = next(_handle_ids)
    _handles[hid] = (handle, post)
    return hid


def poll(handle):
    """True once the operation of `handle` completed."""
    return _handles[handle][0].poll()


def synchronize(handle):
    """Waits for `handle` and returns its output; raises KoloError when it failed."""
    if handle not in _handles:
        raise ValueError("unknown or already synchronized handle %r" % (handle,))
    h, post = _handles.pop(handle)
    return post(h.wait())


def _one(outputs):
    return outputs[0]


# ---- Collectives ------------------------------------------------------------------------------
# process_set: a ProcessSet added with add_process_set; None or global_process_set: every rank.
# The synchronous out-of-place collectives are differentiable, as horovod.torch's: each is a
# torch.autograd.Function whose backward is Horovod's (Note [Collective gradients]).
#
# Note [Collective gradients]
# Horovod's conventions, kept so that its models train the same on Kolo:
#   allreduce       the allreduce of the gradient with the same op and scale factors;
#   allgather       the average over the set of the gradient, then this rank's rows of it;
#   broadcast       the average over the set of the gradient on the root, zero elsewhere;
#   alltoall        the alltoall of the gradient back, with the splits this rank received;
#   reducescatter   the allgather of the gradient, times the set's size for Sum and times the
#                   scale factors (Horovod's; the true gradient of an Average would divide by it).
# The grouped forms do the same tensor by tensor. In-place and _async calls carry no gradient.

def _set_root(root_rank, process_set):
    """The root's rank within the set: a broadcast's root_rank is a GLOBAL rank (Horovod's
    meaning); Kolo's C++ takes the rank within the set, so it is translated here, once."""
    ps = _set_of(process_set)
    if ps.id() == 0:
        return root_rank
    ranks = ps.ranks()
    if root_rank not in ranks:
        raise ValueError("root_rank %r is not a member of %r (a process set's broadcast takes the "
                         "root's global rank, as horovod.torch)" % (root_rank, ps))
    return ranks.index(root_rank)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    h = _C.allreduce_async(_name("allreduce", name), tensor, _op(op, average), prescale_factor,
                           postscale_factor, _set_of(process_set))
    return _register(h, _one)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    h = _C.allreduce_async_(_name("allreduce", name), tensor, _op(op, average), prescale_factor,
                            postscale_factor, _set_of(process_set))
    return _register(h, _one)


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad):
        average, op, pre, post, ps = ctx.args
        return (allreduce(grad, average=average, op=op, prescale_factor=pre,
                          postscale_factor=post, process_set=ps),) + (None,) * 6


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    compressed, ctx = compression.compress(tensor)
    out = _Allreduce.apply(compressed, average, name, op, prescale_factor, postscale_factor,
                           process_set)
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    h = _C.grouped_allreduce_async(_name("grouped_allreduce", name), list(tensors),
                                   _op(op, average), prescale_factor, postscale_factor,
                                   _set_of(process_set))
    return _register(h, list)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    h = _C.grouped_allreduce_async_(_name("grouped_allreduce", name), list(tensors),
                                    _op(op, average), prescale_factor, postscale_factor,
                                    _set_of(process_set))
    return _register(h, list)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (average, op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(
            tensors, average, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        average, op, pre, post, ps = ctx.args
        return (None,) * 6 + tuple(grouped_allreduce(list(grads), average=average, op=op,
                                                     prescale_factor=pre,
                                                     postscale_factor=post, process_set=ps))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor,
                                   process_set, *[c for c, _ in pairs])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor as horovod.torch does: allgathers its indices and values (the
    sum is the concatenation, uncoalesced), divided by the set's size for Average. Returns a
    callable that waits and returns the sparse result (Horovod's handle for this call)."""
    op = _op(op, None)
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async: op must be Average or Sum, got %r" % (op,))
    indices = allgather_async(tensor._indices().transpose(0, 1).contiguous(),
                              name="%s.indices" % name, process_set=process_set)
    values = allgather_async(tensor._values(), name="%s.values" % name, process_set=process_set)
    members = _set_of(process_set).size()

    def handle():
        v = synchronize(values)
        i = synchronize(indices)
        if op == Average:
            v = v / members
        return torch.sparse_coo_tensor(i.transpose(0, 1), v, tensor.size())

    return handle


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _register(_C.allgather_async(_name("allgather", name), tensor, _set_of(process_set)),
                     _one)


def _own_rows(grad, rows, process_set):
    """This rank's slice of a gathered gradient: the rows after those of the lower set ranks."""
    counts = allgather(torch.tensor([rows], dtype=torch.int64), process_set=process_set)
    offset = int(counts[:_set_of(process_set).rank()].sum())
    return grad.narrow(0, offset, rows)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows, ctx.process_set = tensor.shape[0], process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, op=Average, process_set=ctx.process_set)
        return _own_rows(reduced, ctx.rows, ctx.process_set), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    return _Allgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """One allgather per tensor ("<name>.<i>"), all submitted before any is waited for; the
    handle's result is the list of gathered tensors."""
    name = _name("grouped_allgather", name)
    ps = _set_of(process_set)
    handles = [_C.allgather_async("%s.%d" % (name, i), t, ps) for i, t in enumerate(tensors)]
    return _register(_Group(handles), lambda outs: [o[0] for o in outs])


class _Group:
    """Several Kolo handles as one (grouped_allgather, grouped_reducescatter)."""

    def __init__(self, handles):
        self._handles = handles

    def poll(self):
        return all(h.poll() for h in self._handles)

    def wait(self):
        return [h.wait() for h in self._handles]


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows, ctx.process_set = [t.shape[0] for t in tensors], process_set
        return tuple(synchronize(grouped_allgather_async(tensors, name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce(list(grads), op=Average, process_set=ctx.process_set)
        return (None, None) + tuple(_own_rows(g, rows, ctx.process_set)
                                    for g, rows in zip(reduced, ctx.rows))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _register(_C.broadcast_async(_name("broadcast", name), tensor,
                                        _set_root(root_rank, process_set),
                                        _set_of(process_set)), _one)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _register(_C.broadcast_async_(_name("broadcast", name), tensor,
                                         _set_root(root_rank, process_set),
                                         _set_of(process_set)), _one)


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(grad, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor on every member; root_rank is a global rank (Horovod's meaning)."""
    return _Broadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _split_list(splits):
    """splits as Python ints; a float tensor or a negative count is a ValueError (Horovod's)."""
    if splits is None:
        return []
    if torch.is_tensor(splits) and (splits.dtype.is_floating_point or splits.is_complex()):
        raise ValueError("alltoall: splits must hold integers (torch.int32), got %s" %
                         splits.dtype)
    out = [int(s) for s in splits]
    if any(s < 0 for s in out):
        raise ValueError("alltoall: splits must not be negative, got %s" % out)
    return out


def _alltoall_async(tensor, splits, name, process_set, with_splits):
    h = _C.alltoall_async(_name("alltoall", name), tensor, _split_list(splits),
                          _set_of(process_set))
    if not with_splits:
        return _register(h, _one)
    return _register(h, lambda outs: (outs[0], torch.tensor(h.received_splits(),
                                                            dtype=torch.int32)))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    return _alltoall_async(tensor, splits, name, process_set, splits is not None)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = synchronize(_alltoall_async(tensor, splits, name, process_set, True))
        ctx.received, ctx.process_set = received, process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *unused):
        back, _ = alltoall(grad, splits=ctx.received, process_set=ctx.process_set)
        return back, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The rows received from every rank; with splits, also how many came from each."""
    return _Alltoall.apply(tensor, splits, name, process_set)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    h = _C.reducescatter_async(_name("reducescatter", name), tensor, _op(op, None),
                               prescale_factor, postscale_factor, _set_of(process_set))
    return _register(h, _one)


def _scatter_grad(grad, op, pre, post, process_set):
    """Horovod's reducescatter gradient before the allgather (Note [Collective gradients])."""
    if op == Sum:
        grad = grad * _set_of(process_set).size()
    return grad * (pre * post) if pre * post != 1.0 else grad


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, ps = ctx.args
        return (allgather(_scatter_grad(grad, op, pre, post, ps), process_set=ps),) + (None,) * 5


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    compressed, ctx = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                               postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """One reducescatter per tensor ("<name>.<i>"), all submitted before any is waited for."""
    name = _name("grouped_reducescatter", name)
    ps, op = _set_of(process_set), _op(op, None)
    handles = [_C.reducescatter_async("%s.%d" % (name, i), t, op, prescale_factor,
                                      postscale_factor, ps) for i, t in enumerate(tensors)]
    return _register(_Group(handles), lambda outs: [o[0] for o in outs])


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_reducescatter_async(
            tensors, name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        scaled = [_scatter_grad(g, op, pre, post, ps) for g in grads]
        return (None,) * 5 + tuple(grouped_allgather(scaled, process_set=ps))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                       *[c for c, _ in pairs])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


def barrier(process_set=global_process_set):
    _C.barrier("barrier", _set_of(process_set))


def join(device=-1):
    """Completes once every rank joined; returns the rank that joined last (as Horovod's)."""
    return _C.join()


# ---- Model and optimizer state ---------------------------------------------------------------

def broadcast_parameters(params, root_rank=0):
    """Copies root_rank's values into `params` (a state_dict or named_parameters) on every rank."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
    handles = []
    for name, p in items:
        if not torch.is_tensor(p):
            continue
        with torch.no_grad():
            handles.append(broadcast_async_(p.data, root_rank, name="bcast.param." + name))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` (pickled) on every rank (of the process set); root_rank is a
    global rank, as for broadcast."""
    name = _name("broadcast_object", name)
    _set_root(root_rank, process_set)  # a root outside the set fails here, on every member
    is_root = rank() == root_rank
    if is_root:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        n = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        n = torch.zeros(1, dtype=torch.int64)
    broadcast_(n, root_rank, name=name + ".size", process_set=process_set)
    if not is_root:
        payload = torch.empty(int(n.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=name, process_set=process_set)
    return obj if is_root else pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj` (pickled), as a list in rank order (of the process set). Without a name
    it is named after obj's type, as in Horovod (not the unnamed-operation counter: a rank that
    skipped another unnamed call, e.g. while it had joined, still meets the others here)."""
    if name is None:
        name = "allgather_object." + type(obj).__name__
    payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name=name + ".sizes",
                      process_set=process_set)
    data = allgather(payload, name=name, process_set=process_set).numpy().tobytes()
    out, at = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(data[at:at + n]))
        at += n
    return out


def _initialize_optimizer_state(optimizer, model=None):
    """A new optimizer has no state (momentum buffers, ...) until its first step; as Horovod does,
    step once on zero gradients so that every rank has the buffers root_rank's values go into.
    The step is the wrapped optimizer's own (no allreduce), so it does not need every rank."""
    if len(optimizer.state_dict()["state"]) != 0:
        return
    sparse = set()
    if model is not None:
        sparse = {id(p) for m in model.modules()
                  if isinstance(m, torch.nn.Embedding) and m.sparse for p in m.parameters()}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p.data)
                if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
                    p.grad = p.grad.to_sparse()
    if "_reducer" in vars(optimizer):  # a DistributedOptimizer: its class derives the original
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank=0, model=None):
    """Copies root_rank's optimizer state_dict (buffers and hyper-parameters) to every rank,
    initialising the state first where the optimizer has not stepped yet (as Horovod).
    model: optional, names the sparse embeddings (their zero gradients are sparse)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state (as horovod.torch)")
    _initialize_optimizer_state(optimizer, model)
    state = None
    if rank() == root_rank:
        buf = io.BytesIO()
        torch.save(optimizer.state_dict(), buf)
        state = buf.getvalue()
    state = broadcast_object(state, root_rank, name="bcast.optimizer_state")
    if rank() != root_rank:
        optimizer.load_state_dict(torch.load(io.BytesIO(state)))


# ---- DistributedOptimizer -------------------------------------------------------------------

_WIRE = {Compression.none: 0, Compression.fp16: 1, Compression.bf16: 2}  # kolo::torch::Compression
BUCKET_BYTES = 4 << 20  # kolo::torch::DistributedOptions::bucket_bytes


class _DistributedOptimizer(torch.optim.Optimizer):
    """Horovod's API on Kolo's C++ GradientReducer (kolo/torch.h), the communication of
    Kolo::torch's DistributedOptimizer: a post hook on each parameter's gradient accumulator
    counts passes; when the last gradient of a bucket (Note [Buckets]: reverse registration
    order, up to bucket_size bytes) is final, one allreduce carries the whole bucket while
    backward goes on. The hooks are C++, so a step costs Python no code per parameter: step()
    calls synchronize() (waits, averages in place), the wrapped optimizer's step, mark_step()."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, bucket_size, process_set, sparse_as_dense=False):
        super(self.__class__, self).__init__(params)
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:  # group i's parameter j: unique over every group (Horovod's names)
            named_parameters = [("allreduce.noname.%d.%d" % (i, j), v)
                                for i, group in enumerate(self.param_groups)
                                for j, v in enumerate(group["params"])]
        names = [k for k, _ in named_parameters]
        if len(set(names)) != len(names):
            raise ValueError("parameter names in named_parameters must be unique")
        all_params = {id(v) for g in self.param_groups for v in g["params"]}
        missing = all_params - {id(v) for _, v in named_parameters}
        if missing:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             "were not named")
        if compression not in _WIRE:
            raise ValueError("kolo.torch's DistributedOptimizer compresses in C++: compression "
                             "must be Compression.none, fp16 or bf16, got %r" % (compression,))
        op = _op(op, None)
        if op not in (Average, Sum):
            raise ValueError("DistributedOptimizer: op must be Average or Sum, got %r" % (op,))
        name_of = {id(v): k for k, v in named_parameters}
        self._parameter_names = {v: k for k, v in named_parameters}  # Horovod's attribute
        # Registration order: the optimizer's; the reducer buckets from the end.
        ordered = [(name_of[id(p)], p) for g in self.param_groups for p in g["params"]
                   if p.requires_grad]
        self.backward_passes_per_step = backward_passes_per_step
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        if not _set_of(process_set).includes(rank()):
            # Not a member: the set's optimizer steps here on local gradients (as Horovod).
            self._reducer = _LocalReducer()
        else:
            # Average: Kolo's exact averaging (sample counts from set_local_batch_size; without
            # them, the mean over ranks). Passes are summed as Horovod sums them.
            self._reducer = _C.GradientReducer(
                ordered, backward_passes_per_step=backward_passes_per_step,
                compression=_WIRE[compression], weight_by_sample_count=op == Average, op=op,
                mean_over_passes=False, gradient_predivide_factor=gradient_predivide_factor,
                bucket_bytes=bucket_size, process_set=_set_of(process_set))
        self._synchronized = False
        self._should_synchronize = True

    def set_local_batch_size(self, n):
        """Adds n samples to this rank's count for this step: the reduced gradient is then the
        sample-weighted mean over ranks (exact for uneven local batches)."""
        self._reducer.set_local_batch_size(n)

    @property
    def submitted_during_backward(self):
        """Gradients whose hook found them final during backward, since construction."""
        return self._reducer.stats()["submitted_from_hooks"]

    def stats(self):
        """Counters since construction: steps, submitted_from_hooks, submitted_at_step and
        allreduces (gradient allreduces submitted: one per bucket and step)."""
        return self._reducer.stats()

    def bucket_names(self):
        return self._reducer.bucket_names()

    def synchronize(self):
        """Waits for every bucket's allreduce (submitting those no backward pass completed) and
        leaves the averaged gradients in .grad. Raises KoloError naming the tensor on failure."""
        self._reducer.synchronize()
        self._synchronized = True

    def no_sync(self):
        """A context in which backward passes accumulate gradients locally (no communication),
        as DDP's no_sync(); the next pass outside it reduces the sum."""
        return self._reducer.no_sync()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this context does not synchronize (call synchronize() before)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                # Horovod's wording first: scripts and its tests look for it.
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(): no backward pass since "
                              "the last synchronize(); use skip_synchronize() around step()")
            self.synchronize()
        self._synchronized = False
        loss = super(self.__class__, self).step(closure)
        self._reducer.mark_step()  # the autotuner's step boundary; buckets follow its size
        return loss

    def _abandon_step(self):
        """Drops an unfinished step (elastic: the world broke during it; TorchState.restore)."""
        self._reducer.abandon_step()
        self._synchronized = False

    def zero_grad(self, *args, **kwargs):
        if self._reducer.pending():
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


class _LocalReducer:
    """The reducer of a rank outside the optimizer's process set: no communication."""

    def set_local_batch_size(self, n):
        pass

    def stats(self):
        return {"steps": 0, "submitted_from_hooks": 0, "submitted_at_step": 0, "allreduces": 0}

    def bucket_names(self):
        return []

    def synchronize(self):
        pass

    def no_sync(self):
        return contextlib.nullcontext()

    def mark_step(self):
        pass

    def abandon_step(self):
        pass

    def pending(self):
        return False


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, bucket_size=BUCKET_BYTES, shard=None):
    """Wraps `optimizer` (an instance) in a class deriving from its class, as Horovod does.
    Gradients travel in buckets of up to bucket_size bytes (0: one allreduce per parameter; the
    autotuner's size replaces it when KOLO_AUTOTUNE is on). num_groups and groups (Horovod's
    manual grouping) are superseded by the buckets; process_set: the ranks that average.
    shard: None (every rank steps every parameter), "optimizer_state" (ZeRO stage 1: each rank
    keeps optimizer state for its own parameters only) or "gradients" (stage 2: also drops the
    gradients it does not own after the reduce); docs/zero-torch.md."""
    if shard is None:
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
                   dict(_DistributedOptimizer.__dict__))
        return cls(optimizer.param_groups, named_parameters, compression,
                   backward_passes_per_step, op, gradient_predivide_factor, bucket_size,
                   process_set, sparse_as_dense)
    from . import zero
    return zero.sharded(optimizer, shard, _DistributedOptimizer, named_parameters, compression,
                        backward_passes_per_step, op, gradient_predivide_factor, bucket_size,
                        process_set)


from . import elastic  # noqa: E402,F401  (hvd.elastic, as horovod.torch has it)
from .zero import ZeroRedundancyOptimizer  # noqa: E402,F401  (docs/zero-torch.md)
