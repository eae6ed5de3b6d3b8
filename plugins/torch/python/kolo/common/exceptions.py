"""horovod.common.exceptions' names: `from kolo.common.exceptions import HorovodInternalError`.

HorovodInternalError: a collective failed because the world broke (a peer was lost:
kolo::elastic::is_world_change); hvd.elastic.run restores the state and re-forms the world.
HostsUpdatedInterrupt: the launcher has a newer world with ranks to add (state.commit()); run()
re-forms the world and syncs. Both are kolo.torch.KoloError (a RuntimeError), defined by the
plugin's extension module, which this imports.
"""
from kolo.torch import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
