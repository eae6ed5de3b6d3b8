"""TorchState: horovod.torch.elastic.TorchState on Kolo.

A State holds, in this process's memory, the last commit of what a rank needs to go on: models
(their state_dict: parameters and buffers), optimizers, learning-rate schedulers, ElasticSamplers
and plain attributes (epoch=0, batch=0, ...), each readable and writable as state.<name>.

Note [Elastic sync source]. sync() makes every rank equal to the rank with the most commits (the
lowest such rank), as kolo::elastic::State::sync does, not simply to rank 0. In the ordinary case
they are the same rank: a re-formed world keeps the survivors in their old rank order and puts
new workers last (rendezvous/elastic_plan.h, make_plan: rank 0 is the first worker kolorun
names, and kolorun names the survivors first), and survivors have committed alike. They can
differ when a peer is lost in the middle of a step: a collective may complete on some ranks and
fail on others, so one survivor committed the step and another rolled back to the commit before.
Either commit is a consistent history; taking the newest loses no step, and taking it whole from
one rank (model, optimizer, sampler and attributes together) keeps it consistent. The choice
costs one allgather of an int64 per sync.
"""
import copy

import torch

from .sampler import ElasticSampler


class _ModelHandler:
    """A torch.nn.Module: its state_dict, broadcast tensor by tensor."""

    def __init__(self, value):
        self.value = value
        self.save()

    def save(self):
        self._saved = {k: v.detach().clone() for k, v in self.value.state_dict().items()}

    def restore(self):
        self.value.load_state_dict(self._saved)

    def broadcast(self, root_rank):
        from .. import broadcast_parameters
        broadcast_parameters(self.value.state_dict(), root_rank=root_rank)


class _StateDictHandler:
    """An optimizer, LR scheduler or ElasticSampler: its state_dict, travelling pickled with the
    State's other objects (one broadcast_object per sync)."""

    def __init__(self, value):
        self.value = value
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        # A DistributedOptimizer's step that a failure interrupted (passes counted, allreduces
        # submitted in the broken world) would otherwise be counted into the next one.
        if hasattr(self.value, "_abandon_step"):
            self.value._abandon_step()
        # Optimizer.load_state_dict copies; a sampler's or scheduler's may keep what it is given.
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def payload(self):
        return self.value.state_dict()

    def load(self, payload):
        self.value.load_state_dict(payload)

    def broadcast(self, root_rank):
        pass  # in the objects' payload


def _handler_for(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, (torch.optim.Optimizer, torch.optim.lr_scheduler._LRScheduler,
                          ElasticSampler)):
        return _StateDictHandler(value)
    return None


class State:
    """What run() needs of a state (Horovod's horovod.common.elastic.State): commit, restore,
    sync, check_host_updates and reset callbacks. Subclasses define save(), restore(),
    _sync_from(root_rank)."""

    def __init__(self):
        self._reset_callbacks = []
        self._commits = 0

    def register_reset_callbacks(self, callbacks):
        """Callbacks called with no argument after each world change, once the state is synced
        and before the training function is called again: what depends on the world's size (a
        learning rate scaled by it) is rebuilt here."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    @property
    def commits(self):
        """How many commits the saved state stands for (sync adopts the newest rank's count)."""
        return self._commits

    def commit(self):
        """Saves the state in this process's memory, then asks (collectively: every rank calls
        commit at the same point) whether the launcher has a newer world; raises
        HostsUpdatedInterrupt on every rank when it has. Cost: the copy, and in an elastic job
        one broadcast of a number from rank 0."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the launcher has published a newer
        world (ranks to add). Collective in an elastic job; nothing elsewhere."""
        from .. import _C
        _C.elastic_check_world()

    def sync(self):
        """Makes every rank's state and saved state the state of the rank with the most commits
        (Note [Elastic sync source]); rank 0's current values when no rank has committed.
        Collective."""
        from .. import allgather
        counts = allgather(torch.tensor([self._commits], dtype=torch.int64),
                           name="elastic.state.commits").tolist()
        newest = max(counts)
        self._sync_from(counts.index(newest))
        self.save()
        self._commits = newest

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def _sync_from(self, root_rank):
        raise NotImplementedError


class TorchState(State):
    """TorchState(model=None, optimizer=None, **kwargs): a model, an optimizer and any keyword
    attributes (more models and optimizers, LR schedulers, ElasticSamplers, counters such as
    epoch=0, batch=0), each exposed as an attribute. commit() snapshots them all in host memory
    (model and optimizer state_dicts copied; attributes deep-copied), restore() rolls back to the
    last commit, sync() makes every rank equal (Note [Elastic sync source])."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, attrs = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                attrs[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, "_handlers", handlers)
        object.__setattr__(self, "_attr_names", list(attrs))
        object.__setattr__(self, "_saved_attrs", copy.deepcopy(attrs))
        super().__init__()
        for name, value in kwargs.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        # Assigning a new model or optimizer tracks it from now on, as Horovod's does.
        if not name.startswith("_") and name in self._handlers:
            handler = _handler_for(value)
            if handler is None:
                raise TypeError("TorchState.%s holds a %s; got a %s" % (
                    name, type(self._handlers[name].value).__name__, type(value).__name__))
            self._handlers[name] = handler
        object.__setattr__(self, name, value)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        self._saved_attrs = {k: copy.deepcopy(getattr(self, k)) for k in self._attr_names}

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        for name, value in copy.deepcopy(self._saved_attrs).items():
            object.__setattr__(self, name, value)

    def _sync_from(self, root_rank):
        from .. import broadcast_object, rank
        for handler in self._handlers.values():
            handler.broadcast(root_rank)  # models: tensor broadcasts
        payload = None
        if rank() == root_rank:
            payload = {"attrs": {k: getattr(self, k) for k in self._attr_names},
                       "objects": {name: h.payload() for name, h in self._handlers.items()
                                   if isinstance(h, _StateDictHandler)}}
        payload = broadcast_object(payload, root_rank=root_rank, name="elastic.state.objects")
        # The root loads too: a sampler re-shards for the new world in load_state_dict.
        for name, value in payload["objects"].items():
            self._handlers[name].load(value)
        for name, value in payload["attrs"].items():
            object.__setattr__(self, name, value)
