"""kolo.torch.elastic: horovod.torch.elastic's API on Kolo's elastic jobs (docs/elastic-torch.md).

    import kolo.torch as hvd          # was: import horovod.torch as hvd

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    train(state)

launched with `kolorun -np 4 --min-np 2 --max-np 6 python3 train.py`. Without --min-np/--max-np
the job is fixed and run() calls the function once, after a sync.
"""
import functools
import sys

from .. import _C, _reform, _world_joined, rank, size
from .. import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401  (as Horovod's)
from .sampler import ElasticSampler  # noqa: F401
from .state import State, TorchState  # noqa: F401



def enabled():
    """Whether this process is a worker of an elastic job (kolorun --min-np/--max-np)."""
    return _C.elastic_enabled()


def generation():
    """The generation of the world this rank is in (0 the first); -1 when the job is not elastic
    or Kolo is not initialised."""
    return _C.elastic_generation()


def _log(message):
    # As kolo::elastic::run() logs the same events (a warning: the job goes on, but lost work).
    sys.stderr.write("[kolo.torch.elastic] %s\n" % message)
    sys.stderr.flush()


def _reset_limit(explicit):
    if explicit is None:
        # KOLO_ELASTIC_RESET_LIMIT as kolo::init() parsed and checked it.
        return _C.elastic_reset_limit()
    if isinstance(explicit, bool) or not isinstance(explicit, int) or explicit < 0:
        raise ValueError("reset_limit must be an integer >= 0, got %r" % (explicit,))
    return explicit


def run(func=None, reset_limit=None):
    """Decorator (Horovod's hvd.elastic.run): `train(state, ...)` syncs `state` (every rank,
    a joining one included, starts from the newest commit) and calls the function. In an
    elastic job, when the function raises HorovodInternalError (a peer was lost: the state rolls
    back to its last commit) or HostsUpdatedInterrupt (the launcher has ranks to add: raised by
    state.commit(), with the state just committed), the rank leaves its world and joins the next
    one (kolo::elastic::reform), syncs the state, calls its reset callbacks and calls the
    function again (a worker that joins a re-formed world calls them after its first sync). A
    world change inside the re-form, the sync or a callback is answered the same way, as
    kolo::elastic::run() answers it. After `reset_limit` re-forms (default
    KOLO_ELASTIC_RESET_LIMIT, 100) the next world change propagates, saying so; when the job
    cannot go on (fewer ranks than --min-np) that is HorovodInternalError with kolorun's message.
    Other exceptions propagate at once. Not elastic: one sync and one call. Usable as @run or
    @run(reset_limit=3)."""
    if func is None:
        return functools.partial(run, reset_limit=reset_limit)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        limit = _reset_limit(reset_limit)
        _world_joined()
        if not enabled():
            state.sync()
            return func(state, *args, **kwargs)
        resets = 0
        # A worker that joins a re-formed world (kolorun --respawn, discovered slots) takes a
        # state synced from another world size: its callbacks run too, or it would keep, say,
        # the learning rate the sync brought, scaled for the old size.
        joined_late = generation() > 0
        while True:
            try:
                state.sync()
                if resets and rank() == 0:
                    _log("generation %d formed: %d ranks; resuming from commit %d" % (
                        generation(), size(), state.commits))
                if resets or joined_late:
                    state.on_reset()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                failure = e
                state.restore()
            except HostsUpdatedInterrupt as e:
                failure = e  # commit() saved the state just before
            resets = _rejoin(failure, resets, limit)

    return wrapper


def _rejoin(failure, resets, limit):
    """Re-forms the world after `failure`, retrying a re-form that fails with a world change
    (a generation superseded while joining it); raises once `limit` re-forms are spent.
    Returns the new count of re-forms."""
    while True:
        if resets >= limit:
            raise type(failure)("%s (kolo.torch.elastic.run: gave up after re-forming the world "
                                "%d times: the reset limit)" % (failure, resets)) from failure
        resets += 1
        _log("re-forming the world (%d of at most %d) after: %s: %s" % (
            resets, limit, type(failure).__name__, failure))
        try:
            _reform()
            return resets
        except (HorovodInternalError, HostsUpdatedInterrupt) as e:
            failure = e
