"""ElasticSampler: horovod.torch.elastic.ElasticSampler on Kolo's world.

Note [Elastic sampler order]. An epoch is one permutation of the dataset (random.Random(seed +
epoch), as Horovod's, or the identity without shuffle). The world consumes it from the front:
rank r of W takes positions r, r + W, r + 2W, ... of what remains, so with B samples per rank
and step, step s of the world takes positions [s*B*W, (s+1)*B*W) together. What the world has
used is therefore always a prefix of the permutation, and one number says which: processed_num,
the count of positions used, advanced by record_batch on every rank alike. A re-shard (reset,
after the world changed) splits the rest, permutation[processed_num:], over the new world the
same way, so the permutation's order holds across any number of re-shards and no sample is used
twice or left out. A lost rank's samples need no record of their own: they are in the prefix
whenever the step that used them was committed.

Padding. When W does not divide what remains, the shards would differ in length and ranks in
their number of steps. As Horovod's (and torch's DistributedSampler), the sampler then repeats
the first W - n % W remaining positions at the end (cyclically when n < W), so every rank gets
ceil(n / W): those few samples are used twice in that epoch. A dataset (and commit points) whose
remaining count the world's size divides avoids it.
"""
import math
import random

import torch.utils.data


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions `dataset` over the ranks and, after a world change, partitions the samples of
    the epoch not yet used over the new ranks (Note [Elastic sampler order]). Put it in the
    TorchState (TorchState(..., train_sampler=sampler)): its position is then committed,
    restored and synced with the model. Call record_batch(batch_idx, batch_size) after each
    step, and set_epoch(epoch) when a new epoch starts (it forgets the used samples)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # positions of this epoch's permutation the world has used
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.indices = []  # this rank's shard of the remaining indices, padded
        self.num_samples = 0
        self.total_size = 0
        self._order, self._order_key = None, None
        self.reset()

    def set_epoch(self, epoch):
        """Starts `epoch`: its own permutation, none of its samples used yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank has used one more batch of `batch_size` samples (call it on
        every rank after each step, before commit())."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """Horovod's older form of record_batch: `indices` is this rank's batch (get_indices),
        and every rank records a batch of the same size."""
        self.record_batch(0, len(indices))

    def get_indices(self, batch_idx, batch_size):
        """The dataset indices of this rank's batch `batch_idx` since the last reset."""
        begin = batch_idx * batch_size
        return self.indices[begin:min(begin + batch_size, len(self.indices))]

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Shards what remains of the epoch over the current world (kolo.torch's size and
        rank)."""
        from .. import rank, size  # the package imports this module first
        self._shard(size(), rank())

    def epoch_order(self):
        """The epoch's permutation of the dataset's indices (a list: do not modify it)."""
        # Kept per epoch: shuffling in Python costs ~25 ms for 60,000 samples, and restore()
        # and sync() re-shard.
        key = (self.epoch, len(self.dataset), self.shuffle, self.seed)
        if self._order_key != key:
            order = list(range(len(self.dataset)))
            if self.shuffle:
                random.Random(self.seed + self.epoch).shuffle(order)
            self._order, self._order_key = order, key
        return self._order

    def _shard(self, num_replicas, rank):
        # Separate from reset() so that the tests can shard for worlds other than their own.
        self.num_replicas = num_replicas
        self.rank = rank
        self.remaining_indices = self.epoch_order()[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / num_replicas))
        self.total_size = self.num_samples * num_replicas
        n = len(self.remaining_indices)
        # Cyclic, for the case of fewer remaining samples than ranks.
        padded = self.remaining_indices + [self.remaining_indices[i % n]
                                           for i in range(self.total_size - n)]
        self.indices = padded[rank:self.total_size:num_replicas]

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples
