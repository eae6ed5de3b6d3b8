"""ZeRO stages 1 and 2 for kolo.torch (docs/zero-torch.md).

DistributedOptimizer(..., shard="optimizer_state" | "gradients") and ZeroRedundancyOptimizer
(torch.distributed.optim's interface) end here. The layout is PyTorch's ZeroRedundancyOptimizer's
per-parameter partition, not docs/zero.md's flat per-bucket shards: each parameter belongs whole
to one rank (per param group, largest first, to the least loaded rank), so the wrapped torch
optimizer steps real parameters and keeps its usual per-parameter state. Flat shards would cut a
parameter across ranks, which an optimizer that reads a parameter's shape (or keeps a state
tensor not shaped like it) cannot step; whole parameters keep every per-parameter optimizer
exact, at the price of a balance to within one parameter instead of one element.

A step: the gradients are averaged by the unsharded optimizer's GradientReducer (bucketed
allreduces that start during backward, Kolo's exact sample-count weighting), each rank steps the
parameters it owns, then one broadcast per rank and dtype carries that rank's updated parameters
(flattened in a fixed order) to every rank. Stage 2 drops the gradients of parameters this rank
does not own right after the reduce, before the optimizer allocates anything.
"""
import torch

from . import _kolo_torch as _C

SHARDS = ("optimizer_state", "gradients")

# Optimizers whose update of a parameter reads only that parameter, its gradient and its own
# state: stepping a subset of the parameters gives those parameters exactly the unsharded update.
_PER_PARAMETER = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad,
                  torch.optim.Adadelta, torch.optim.Adamax, torch.optim.NAdam, torch.optim.RAdam,
                  torch.optim.RMSprop, torch.optim.ASGD, torch.optim.Rprop)
_WHY_NOT = {
    "LBFGS": "its update is a line search over all parameters as one vector",
    "SparseAdam": "it takes sparse gradients, which Kolo's reducer does not carry",
}


def check_shardable(optimizer, shard):
    """Raises ValueError naming what cannot be sharded (the shard value, the optimizer class)."""
    if shard not in SHARDS:
        raise ValueError("DistributedOptimizer: shard must be None, %s, got %r"
                         % (" or ".join(repr(s) for s in SHARDS), shard))
    name = type(optimizer).__name__
    if not isinstance(optimizer, _PER_PARAMETER):
        why = _WHY_NOT.get(name, "Kolo knows no per-parameter update for it (sharding steps "
                           "each rank's parameters alone)")
        raise ValueError("DistributedOptimizer(shard=%r): the optimizer state of %s cannot be "
                         "sharded: %s; shardable: %s"
                         % (shard, name, why, ", ".join(c.__name__ for c in _PER_PARAMETER)))


def partition(param_groups, world):
    """owner[i] for the i-th parameter over all groups (state_dict's numbering): per group, the
    largest parameters first to the least loaded rank (ties: the lowest rank), as PyTorch's
    ZeroRedundancyOptimizer; deterministic, so every rank computes the same."""
    owner, load, base = [], [0] * world, 0
    for group in param_groups:
        params = group["params"]
        owner.extend([0] * len(params))
        for i in sorted(range(len(params)), key=lambda i: (-params[i].numel(), i)):
            rank = min(range(world), key=lambda q: (load[q], q))
            owner[base + i] = rank
            load[rank] += params[i].numel()
        base += len(params)
    return owner


def state_bytes(optimizer):
    """Bytes of the tensors in optimizer.state on this rank (sharded or not)."""
    return sum(v.numel() * v.element_size() for s in optimizer.state.values()
               for v in s.values() if torch.is_tensor(v))


class _Sharded:
    """The methods a sharded DistributedOptimizer adds to or replaces in _DistributedOptimizer's.
    self.param_groups holds this rank's parameters only (the wrapped torch optimizer's step and
    state see nothing else; LR schedulers edit these groups); _all_groups holds every one."""

    def _shard_init(self, shard, process_set):
        from . import _set_of
        self._shard = shard
        self._set = process_set
        pset = _set_of(process_set)
        self._me, world = pset.rank(), pset.size()
        self._all_groups = self.param_groups
        owner = partition(self._all_groups, world)
        flat = [p for g in self._all_groups for p in g["params"]]
        self._owner = owner
        self._flat = flat
        self._global_index = [i for i, q in enumerate(owner) if q == self._me]
        # The broadcasts' layout: per dtype and rank, its parameters flat in the groups' order.
        self._dtypes = sorted({p.dtype for p in flat}, key=str)
        self._by_rank = {dt: [[p for p, q in zip(flat, owner) if q == r and p.dtype == dt]
                              for r in range(world)] for dt in self._dtypes}
        self.param_groups, base = [], 0
        for g in self._all_groups:
            n = len(g["params"])
            self.param_groups.append(dict(g, params=[p for i, p in enumerate(g["params"])
                                                     if owner[base + i] == self._me]))
            base += n
        self._consolidated = None

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("a sharded DistributedOptimizer takes no closure: run forward and "
                             "backward before step()")
        if self._should_synchronize:
            if self._synchronized:
                import warnings
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(): no backward pass since "
                              "the last synchronize(); use skip_synchronize() around step()")
            self.synchronize()
        self._synchronized = False
        if self._shard == "gradients":
            for p, q in zip(self._flat, self._owner):
                if q != self._me:
                    p.grad = None
        super(self.__class__, self).step()
        self._reducer.mark_step()
        self._gather_parameters()

    def _gather_parameters(self):
        # One broadcast per rank and dtype, all in flight at once, rather than one allgather:
        # Kolo's allgather of 1.2M floats a rank took 17-23 ms on 2 ranks, the two broadcasts
        # 6-8 ms (docs/zero-torch.md); the bytes on the wire are the same.
        from . import broadcast_async_, synchronize
        with torch.no_grad():
            pending = []
            for dt in self._dtypes:
                tag = str(dt).split(".")[-1]
                for r, params in enumerate(self._by_rank[dt]):
                    if not params:
                        continue
                    if r == self._me:
                        flat = torch.cat([p.detach().reshape(-1) for p in params])
                    else:
                        flat = torch.empty(sum(p.numel() for p in params), dtype=dt)
                    h = broadcast_async_(flat, r, name="zero.parameters.%s.%d" % (tag, r),
                                         process_set=self._set)
                    pending.append((h, r, flat, params))
            for h, r, flat, params in pending:
                synchronize(h)
                if r == self._me:
                    continue
                at = 0
                for p in params:
                    p.copy_(flat[at:at + p.numel()].view_as(p))
                    at += p.numel()

    def zero_grad(self, set_to_none=False):
        if self._reducer.pending():
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize()")
        for p in self._flat:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.requires_grad_(False)
                p.grad.zero_()

    def optimizer_state_bytes(self):
        """Bytes of optimizer state tensors on this rank."""
        return state_bytes(self)

    def consolidate_state_dict(self, to=0):
        """Collective: gathers every rank's optimizer state on rank `to` (of the process set),
        whose state_dict() then returns the unsharded optimizer's state_dict."""
        from . import allgather_object
        local = super(self.__class__, self).state_dict()
        mine = {self._global_index[i]: s for i, s in local["state"].items()}
        parts = allgather_object(mine, name="zero.consolidate", process_set=self._set)
        if self._me != to:
            self._consolidated = None
            return
        state = {}
        for part in parts:
            state.update(part)
        groups, base = [], 0
        for g, local_g in zip(self._all_groups, local["param_groups"]):
            groups.append(dict(local_g, params=list(range(base, base + len(g["params"])))))
            base += len(g["params"])
        self._consolidated = {"state": dict(sorted(state.items())), "param_groups": groups}

    def state_dict(self):
        """The consolidated (unsharded) state_dict, on the rank consolidate_state_dict(to=)
        named; elsewhere a RuntimeError, as PyTorch's ZeroRedundancyOptimizer."""
        if self._consolidated is None:
            raise RuntimeError("a sharded optimizer's state_dict() needs consolidate_state_dict("
                               "to=...) called on every rank first, and is only on rank `to`; "
                               "this is rank %d" % self._me)
        return self._consolidated

    def load_state_dict(self, state_dict):
        """Takes an unsharded state_dict (every rank passes the same) and keeps this rank's
        part: the state of the parameters it owns, the groups' hyper-parameters."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self._all_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self._all_groups)):
            raise ValueError("load_state_dict: the state_dict has groups of %s parameters, this "
                             "optimizer %s" % ([len(g["params"]) for g in groups],
                                               [len(g["params"]) for g in self._all_groups]))
        numbering = [i for g in groups for i in g["params"]]
        local_of = {numbering[gi]: li for li, gi in enumerate(self._global_index)}
        local_groups, at = [], 0
        for g, mine in zip(groups, self.param_groups):
            local_groups.append(dict(g, params=list(range(at, at + len(mine["params"])))))
            at += len(mine["params"])
        local_state = {local_of[k]: v for k, v in state_dict["state"].items() if k in local_of}
        super(self.__class__, self).load_state_dict({"state": local_state,
                                                     "param_groups": local_groups})


def sharded(optimizer, shard, base, named_parameters, compression, backward_passes_per_step, op,
            gradient_predivide_factor, bucket_size, process_set):
    """DistributedOptimizer(shard=...): a class deriving from the optimizer's class with base's
    methods (_DistributedOptimizer) and _Sharded's."""
    check_shardable(optimizer, shard)
    methods = dict(base.__dict__)
    methods.update({k: v for k, v in _Sharded.__dict__.items()
                    if k not in ("__dict__", "__weakref__", "__doc__", "__module__")})
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    opt = cls.__new__(cls)
    base.__init__(opt, optimizer.param_groups, named_parameters, compression,
                  backward_passes_per_step, op, gradient_predivide_factor, bucket_size,
                  process_set)
    opt._shard_init(shard, process_set)
    return opt


def ZeroRedundancyOptimizer(params, optimizer_class, process_group=None,
                            parameters_as_bucket_view=False, overlap_with_ddp=False,
                            named_parameters=None, **defaults):
    """torch.distributed.optim.ZeroRedundancyOptimizer's interface on Kolo: step(),
    consolidate_state_dict(to=0), state_dict() on rank `to`, load_state_dict(). Unlike PyTorch's
    it also averages the gradients (Kolo's reducer): train the bare model, not a DDP one.
    process_group: None or a kolo.torch.ProcessSet."""
    from . import DistributedOptimizer, global_process_set
    if overlap_with_ddp:
        raise ValueError("ZeroRedundancyOptimizer: overlap_with_ddp is DDP's; Kolo's reducer "
                         "already overlaps the gradient reduction with backward")
    del parameters_as_bucket_view  # the broadcasts always pack each rank's parameters flat
    inner = optimizer_class(params, **defaults)
    return DistributedOptimizer(inner, named_parameters=named_parameters,
                                process_set=process_group or global_process_set,
                                shard="optimizer_state")
