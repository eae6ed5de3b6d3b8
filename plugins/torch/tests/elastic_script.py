"""An elastic training script written as Horovod's elastic guide writes one (hvd.elastic.run,
TorchState with the model, optimizer, an ElasticSampler and counters, a commit per batch, a
reset callback scaling the learning rate), with only the import changed. torch_test.cc runs it
on a fixed 2-rank job and, with --kill-rank, on an elastic job in which one rank kills itself.

144 samples, 6 per rank and step: a step of 2 or 3 ranks uses 12 or 18 samples, so what
remains of an epoch is always a multiple of 6, which 2 and 3 divide: the sampler never pads,
whatever step the world changes at.

What the guide's script does not have, for the test: each sample carries its index, and the
state counts, in `seen`, how many times the world trained on each sample (an allreduce of the
batch's indices per step). `seen` is committed, restored and synced with the model, so at the
end it holds the committed history: every sample exactly once per epoch. The world size of
every committed step is in the state too, and one process replaying those steps must end with
the same model (to float rounding). Prints "[ok] elastic_script ..." on success.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd  # was: import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=6)
parser.add_argument("--samples", type=int, default=144)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--batches-per-commit", type=int, default=1)
parser.add_argument("--kill-rank", type=int, default=-1, help="this rank of generation 0 ...")
parser.add_argument("--kill-step", type=int, default=-1, help="... kills itself at this step")
parser.add_argument("--kill-after-update", action="store_true", help="... once the step has "
                    "updated the model (so the survivors' update is uncommitted), not before it")
parser.add_argument("--expect-steps", type=int, default=-1)
parser.add_argument("--expect-resets", type=int, default=0, help="-1: any")
parser.add_argument("--expect-size", type=int, default=-1, help="the final world's; -1: any")
parser.add_argument("--grow-file", default="", help="rank 0 of generation 0 creates this file "
                    "at --grow-at-step (a host discovery script then reports another slot)")
parser.add_argument("--grow-at-step", type=int, default=-1)
parser.add_argument("--process-sets", action="store_true", help="3 ranks, rank 1 lost: ranks 0 "
                    "and 2 form a set before training, which must work after, renumbered; ranks 1 "
                    "and 2 form one that must fail, naming itself")
parser.add_argument("--step-sleep", type=float, default=0, help="seconds per step while the "
                    "world is smaller than --expect-size, so that a worker kolorun starts "
                    "meanwhile joins before the end")
args = parser.parse_args()
sys.stdout.reconfigure(line_buffering=True)
torch.set_num_threads(1)

hvd.init()
torch.manual_seed(42)


class IndexedDataset(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(n, 10, generator=g)
        self.y = (self.x[:, :3].sum(dim=1) > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


train_dataset = IndexedDataset(args.samples)
train_sampler = hvd.elastic.ElasticSampler(train_dataset, shuffle=True, seed=3)
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                           sampler=train_sampler)

first_rank = hvd.rank()
if args.process_sets:
    survivors_set = hvd.add_process_set([0, 2])
    lost_set = hvd.add_process_set([1, 2])


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
resets = 0


def maybe_kill(state):
    if (hvd.elastic.generation() == 0 and hvd.rank() == args.kill_rank and
            state.steps == args.kill_step):
        print("killing myself at step %d" % state.steps)
        os.kill(os.getpid(), 9)


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, args.epochs):
        for state.batch, (data, target, index) in enumerate(train_loader):
            if not args.kill_after_update:
                maybe_kill(state)
            if (args.grow_file and hvd.elastic.generation() == 0 and hvd.rank() == 0 and
                    state.steps == args.grow_at_step):
                open(args.grow_file, "w").close()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            if args.kill_after_update:
                maybe_kill(state)
            counts = torch.bincount(index, minlength=len(train_dataset))
            state.seen += hvd.allreduce(counts, op=hvd.Sum, name="seen")
            state.steps += 1
            state.worlds.append(hvd.size())
            state.train_sampler.record_batch(state.batch, args.batch_size)
            if hvd.size() < args.expect_size:
                time.sleep(args.step_sleep)
            if state.steps % args.batches_per_commit == 0:
                state.commit()
        state.batch = 0
        state.train_sampler.set_epoch(state.epoch + 1)


def on_state_reset():
    global resets
    resets += 1
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, train_sampler=train_sampler, epoch=0, batch=0,
                               steps=0, seen=torch.zeros(len(train_dataset), dtype=torch.int64),
                               worlds=[])
state.register_reset_callbacks([on_state_reset])
train(state)



def replay_committed_history(worlds):
    """One process trains from the same initial model on the committed history's global batches
    (step k of a world of W ranks: the next W * batch positions of the epoch's permutation, the
    union of the ranks' batches) with the learning rate the reset callback set for W, and returns
    its largest difference from this rank's model: no step lost, repeated or half-applied."""
    torch.manual_seed(42)  # as at the start: make_model() is the first draw after it
    reference = make_model()
    opt = torch.optim.SGD(reference.parameters(), lr=args.lr, momentum=0.9)
    order_of = hvd.elastic.ElasticSampler(train_dataset, shuffle=True, seed=3)
    epoch, position = 0, 0
    for world in worlds:
        if position == len(train_dataset):
            epoch, position = epoch + 1, 0
        order_of.set_epoch(epoch)
        take = order_of.epoch_order()[position:position + world * args.batch_size]
        position += len(take)
        for group in opt.param_groups:
            group["lr"] = args.lr * world
        opt.zero_grad()
        x, y, _ = train_dataset[torch.tensor(take)]
        F.cross_entropy(reference(x), y).backward()
        opt.step()
    return max((p - q).abs().max().item()
               for p, q in zip(model.parameters(), reference.parameters()))


# The checks: the committed history used every sample once per epoch, the replicas are equal,
# and equal one process replaying that history.
failures = []
if not torch.equal(state.seen, torch.full_like(state.seen, args.epochs)):
    failures.append("seen %s" % state.seen.tolist())
if args.expect_steps >= 0 and state.steps != args.expect_steps:
    failures.append("steps %d, expected %d" % (state.steps, args.expect_steps))
if args.expect_resets >= 0 and resets != args.expect_resets:
    failures.append("resets %d, expected %d" % (resets, args.expect_resets))
if args.expect_size >= 0 and hvd.size() != args.expect_size:
    failures.append("size %d, expected %d" % (hvd.size(), args.expect_size))
w = torch.cat([p.detach().flatten() for p in model.parameters()])
if not torch.equal(hvd.allreduce(w, op=hvd.Max, name="check.max"),
                   hvd.allreduce(w, op=hvd.Min, name="check.min")):
    failures.append("replicas differ")
if args.process_sets:
    got = (survivors_set.ranks, survivors_set.size(), survivors_set.rank(),
           hvd.allreduce(torch.ones(1), op=hvd.Sum, name="check.set",
                         process_set=survivors_set).item(),
           hvd.broadcast_object(first_rank, root_rank=1, process_set=survivors_set))
    if got != ([0, 1], 2, hvd.rank(), 2.0, 2):
        failures.append("the set of ranks 0 and 2 after the re-form: %s" % (got,))
    if first_rank == 2:
        try:
            hvd.allreduce(torch.ones(1), name="check.lost_set", process_set=lost_set)
            failures.append("the set that lost rank 1 still works")
        except hvd.KoloError as e:
            print("lost set:", e)
replay = replay_committed_history(state.worlds)
print("replay max_diff %.3g over %d steps" % (replay, len(state.worlds)))
if replay > 1e-5:
    failures.append("the model differs from one process replaying the committed history by %g"
                    % replay)
lr = optimizer.param_groups[0]["lr"]
if abs(lr - args.lr * hvd.size()) > 1e-12:
    failures.append("lr %g for %d ranks" % (lr, hvd.size()))
for f in failures:
    print("FAIL", f)
if not failures:
    print("[ok] elastic_script size %d steps %d resets %d epoch %d" % (
        hvd.size(), state.steps, resets, state.epoch))
hvd.shutdown()
sys.exit(1 if failures else 0)
