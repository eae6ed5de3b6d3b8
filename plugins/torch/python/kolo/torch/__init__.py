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

Beyond Horovod: DistributedOptimizer.set_local_batch_size(n) weights each rank's gradient by its
sample count (Kolo's exact averaging: uneven local batches give the gradient of the union).
"""
import contextlib
import io
import itertools
import pickle
import warnings

import torch

from . import _kolo_torch as _C
from ._kolo_torch import KoloError  # noqa: F401  (re-exported)

Sum = _C.SUM
Average = _C.AVERAGE
Min = _C.MIN
Max = _C.MAX
Product = _C.PRODUCT
Adasum = -1  # Horovod's Adasum: not implemented by Kolo (refused with KoloError)

init = _C.init
shutdown = _C.shutdown
is_initialized = _C.is_initialized
rank = _C.rank
size = _C.size
local_rank = _C.local_rank
local_size = _C.local_size
cross_rank = _C.cross_rank
cross_size = _C.cross_size


def mpi_threads_supported():
    return False


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


# ---- Handles --------------------------------------------------------------------------------

_handles = {}  # int -> (kolo handle, postprocess(outputs) -> result)
_handle_ids = itertools.count(1)
_noname = itertools.count()


def _name(kind, name):
    return name if name is not None else "%s.noname.%d" % (kind, next(_noname))


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

def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    h = _C.allreduce_async(_name("allreduce", name), tensor, _op(op, average), prescale_factor,
                           postscale_factor)
    return _register(h, _one)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    h = _C.allreduce_async_(_name("allreduce", name), tensor, _op(op, average), prescale_factor,
                            postscale_factor)
    return _register(h, _one)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    compressed, ctx = compression.compress(tensor)
    out = synchronize(allreduce_async(compressed, average, name, op, prescale_factor,
                                      postscale_factor))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None):
    h = _C.grouped_allreduce_async(_name("grouped_allreduce", name), list(tensors),
                                   _op(op, average), prescale_factor, postscale_factor)
    return _register(h, list)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    h = _C.grouped_allreduce_async_(_name("grouped_allreduce", name), list(tensors),
                                    _op(op, average), prescale_factor, postscale_factor)
    return _register(h, list)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    pairs = [compression.compress(t) for t in tensors]
    outs = synchronize(grouped_allreduce_async([c for c, _ in pairs], average, name, op,
                                               prescale_factor, postscale_factor))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor))


def allgather_async(tensor, name=None, process_set=None):
    return _register(_C.allgather_async(_name("allgather", name), tensor), _one)


def allgather(tensor, name=None, process_set=None):
    return synchronize(allgather_async(tensor, name))


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return _register(_C.broadcast_async(_name("broadcast", name), tensor, root_rank), _one)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return _register(_C.broadcast_async_(_name("broadcast", name), tensor, root_rank), _one)


def broadcast(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async(tensor, root_rank, name))


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name))


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    split_list = [] if splits is None else [int(s) for s in splits]
    h = _C.alltoall_async(_name("alltoall", name), tensor, split_list)
    if splits is None:
        return _register(h, _one)
    return _register(h, lambda outs: (outs[0], torch.tensor(h.received_splits(),
                                                            dtype=torch.int32)))


def alltoall(tensor, splits=None, name=None, process_set=None):
    """The rows received from every rank; with splits, also how many came from each."""
    return synchronize(alltoall_async(tensor, splits, name))


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0):
    h = _C.reducescatter_async(_name("reducescatter", name), tensor, _op(op, None),
                               prescale_factor, postscale_factor)
    return _register(h, _one)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=None, prescale_factor=1.0, postscale_factor=1.0):
    compressed, ctx = compression.compress(tensor)
    out = synchronize(reducescatter_async(compressed, name, op, None, prescale_factor,
                                          postscale_factor))
    return compression.decompress(out, ctx)


def barrier(process_set=None):
    _C.barrier("barrier")


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


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns root_rank's `obj` (pickled) on every rank."""
    name = _name("broadcast_object", name)
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        n = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        n = torch.zeros(1, dtype=torch.int64)
    broadcast_(n, root_rank, name=name + ".size")
    if rank() != root_rank:
        payload = torch.empty(int(n.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=name)
    return obj if rank() == root_rank else pickle.loads(payload.numpy().tobytes())


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Copies root_rank's optimizer state_dict (buffers and hyper-parameters) to every rank."""
    state = None
    if rank() == root_rank:
        buf = io.BytesIO()
        torch.save(optimizer.state_dict(), buf)
        state = buf.getvalue()
    state = broadcast_object(state, root_rank, name="bcast.optimizer_state")
    if rank() != root_rank:
        optimizer.load_state_dict(torch.load(io.BytesIO(state)))


# ---- DistributedOptimizer -------------------------------------------------------------------

class _DistributedOptimizer(torch.optim.Optimizer):
    """Horovod's design: a hook on each parameter's gradient accumulator submits its allreduce
    the moment the gradient is final (communication overlaps the rest of backward); step()
    waits for them and runs the wrapped optimizer's step."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%s" % i, v)
                                for group in self.param_groups
                                for i, v in enumerate(group["params"])]
        names = [k for k, _ in named_parameters]
        if len(set(names)) != len(names):
            raise ValueError("parameter names in named_parameters must be unique")
        all_params = {id(v) for g in self.param_groups for v in g["params"]}
        missing = all_params - {id(v) for _, v in named_parameters}
        if missing:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             "were not named")
        self._parameter_names = {id(v): "grad." + k for k, v in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._op = _op(op, None)
        self._predivide = gradient_predivide_factor
        self._delay = {}
        self._handles = {}  # param -> (kolo handle, ctx, output tensor)
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        self._local_count = None  # set_local_batch_size: Kolo's exact averaging
        self._count = None
        self._count_handle = None
        self.submitted_during_backward = 0
        self._register_hooks()

    def set_local_batch_size(self, n):
        """Adds n samples to this rank's count for this step: the reduced gradient is then the
        sample-weighted mean over ranks (exact for uneven local batches)."""
        self._local_count = (self._local_count or 0) + int(n)

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    self._delay[p] = self.backward_passes_per_step
                    # The AccumulateGrad node of p: its hook runs once p.grad is written.
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
            self._delay[p] -= 1
            if self._delay[p] == 0:
                self._handles[p] = self._submit(p)
                self.submitted_during_backward += 1
        return hook

    def _submit(self, p):
        name = self._parameter_names[id(p)]
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grad = p.grad
        op, pre, post = self._op, 1.0, 1.0
        if self._local_count is not None:
            if self._count_handle is None:
                self._count = torch.tensor([self._local_count], dtype=torch.int64)
                self._count_handle = _C.allreduce_async_("grad.sample_count", self._count, Sum)
            with torch.no_grad():
                grad.mul_(float(self._local_count))
            op = Sum
        elif op == Average and self._predivide != 1.0:
            pre, post = 1.0 / self._predivide, self._predivide
        compressed, ctx = self._compression.compress(grad)
        if compressed is grad:
            return _C.allreduce_async_(name, grad, op, pre, post), ctx, None
        return _C.allreduce_async_(name, compressed, op, pre, post), ctx, compressed

    def synchronize(self):
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._submit(p)
        total = None
        if self._count_handle is not None:
            self._count_handle.wait()
            total = float(self._count.item())
        try:
            for p, (handle, ctx, compressed) in self._handles.items():
                handle.wait()
                with torch.no_grad():
                    if compressed is not None:
                        p.grad.copy_(self._compression.decompress(compressed, ctx))
                    if total == 0:
                        p.grad.zero_()  # no rank had samples this step
                    elif total is not None:
                        p.grad.div_(total)
        finally:
            self._handles.clear()
            for p in self._delay:
                self._delay[p] = self.backward_passes_per_step
            self._local_count = None
            self._count_handle = None
        self._synchronized = True

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
                warnings.warn("optimizer.step() called without a backward pass since the last "
                              "synchronize(); use skip_synchronize() around step()")
            self.synchronize()
        self._synchronized = False
        _C.mark_step()
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wraps `optimizer` (an instance) in a class deriving from its class, as Horovod does."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor)
