"""One rank of kolo.torch's ZeRO tests (zero_torch_test.cc runs it under kolorun). Modes:
  equal  P ranks, uneven local batches, 15 steps of SGD + momentum, Adam and AdamW, with shard=
         "optimizer_state" and "gradients": the parameters equal the unsharded kolo.torch
         DistributedOptimizer's on the same batches (tolerance TOL; the largest difference is
         printed); the optimizer state tensors of the ranks add up to the unsharded bytes and
         each rank holds at most bytes/P plus one parameter's state; stage 2 leaves no gradient
         of a parameter another rank owns; kolo.torch.ZeroRedundancyOptimizer is the same.
  state  consolidate_state_dict(to=0) gives rank 0 the unsharded optimizer's state_dict;
         load_state_dict re-shards it on every rank and training goes on equal.
  bad    an unknown shard value, LBFGS, state_dict() before consolidating: ValueError or
         RuntimeError naming what differed.
Prints "[ok] <mode>" per mode whose checks held, "FAIL ..." otherwise.
"""
import sys

import torch
import torch.nn.functional as F

import kolo.torch as hvd
from kolo.torch import zero

sys.stdout.reconfigure(line_buffering=True)
torch.set_num_threads(1)
failures = 0
TOL = 1e-6  # float32 rounding; the sharded update is the same arithmetic, so 0 is expected


def expect(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL", what)


def model_of(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 24), torch.nn.ReLU(), torch.nn.Linear(24, 24),
                               torch.nn.ReLU(), torch.nn.Linear(24, 24), torch.nn.ReLU(),
                               torch.nn.Linear(24, 3))


def rows_of(r):  # rank r holds r + 2 rows of each global batch
    begin = sum(q + 2 for q in range(r))
    return begin, begin + r + 2


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
}


def train(model, opt, steps, seed=7):
    P, r = hvd.size(), hvd.rank()
    total = rows_of(P - 1)[1]
    torch.manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        x, y = torch.randn(total, 6), torch.randint(0, 3, (total,))
        b, e = rows_of(r)
        opt.set_local_batch_size(e - b)
        F.cross_entropy(model(x[b:e]), y[b:e]).backward()
        opt.step()


def max_diff(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def pair(kind, shard):
    plain, sharded = model_of(100), model_of(100)
    o1 = hvd.DistributedOptimizer(OPTIMIZERS[kind](plain.parameters()),
                                  named_parameters=plain.named_parameters())
    o2 = hvd.DistributedOptimizer(OPTIMIZERS[kind](sharded.parameters()),
                                  named_parameters=sharded.named_parameters(), shard=shard)
    return plain, o1, sharded, o2


def mode_equal():
    P = hvd.size()
    worst = 0.0
    for kind in OPTIMIZERS:
        for shard in zero.SHARDS:
            plain, o1, sharded, o2 = pair(kind, shard)
            train(plain, o1, 15)
            train(sharded, o2, 15)
            d = max_diff(plain, sharded)
            worst = max(worst, d)
            expect(d <= TOL, "%s %s: parameters differ by %g" % (kind, shard, d))
            full, mine = zero.state_bytes(o1), o2.optimizer_state_bytes()
            ranks = hvd.allgather(torch.tensor([mine]), name="zero.test.bytes").tolist()
            largest = max(sum(v.numel() * v.element_size() for v in s.values()
                              if torch.is_tensor(v)) for s in o1.state.values())
            expect(sum(ranks) == full, "%s: state bytes %s add up to %d, not %d"
                   % (kind, ranks, sum(ranks), full))
            expect(mine <= full / P + largest, "%s: rank holds %d state bytes of %d (P=%d)"
                   % (kind, mine, full, P))
            print("state", kind, shard, "bytes", mine, "of", full)
            if shard == "gradients":
                stray = [i for i, (p, q) in enumerate(zip(o2._flat, o2._owner))
                         if q != hvd.rank() and p.grad is not None]
                expect(not stray, "stage 2 kept gradients of parameters %s" % stray)
        # The drop-in for torch.distributed.optim.ZeroRedundancyOptimizer.
        plain, o1, _, _ = pair(kind, "optimizer_state")
        drop_in = model_of(100)
        make = OPTIMIZERS[kind](drop_in.parameters())
        defaults = {k: v for k, v in make.defaults.items() if k in ("lr", "momentum",
                                                                       "weight_decay")}
        o3 = hvd.ZeroRedundancyOptimizer(drop_in.parameters(), type(make), **defaults)
        train(plain, o1, 15)
        train(drop_in, o3, 15)
        d = max_diff(plain, drop_in)
        worst = max(worst, d)
        expect(d <= TOL, "ZeroRedundancyOptimizer %s: parameters differ by %g" % (kind, d))
    print("max parameter difference %g (tolerance %g)" % (worst, TOL))


def mode_state():
    for kind in ("sgd", "adam"):
        plain, o1, sharded, o2 = pair(kind, "optimizer_state")
        train(plain, o1, 5)
        train(sharded, o2, 5)
        o2.consolidate_state_dict(to=0)
        full = o1.state_dict()
        if hvd.rank() == 0:
            got = o2.state_dict()
            expect(sorted(got["state"]) == sorted(full["state"]),
                   "%s: consolidated state of %s, want %s"
                   % (kind, sorted(got["state"]), sorted(full["state"])))
            for i, s in full["state"].items():
                for k, v in s.items():
                    w = got["state"].get(i, {}).get(k)
                    expect(w is not None and torch.equal(torch.as_tensor(v), torch.as_tensor(w)),
                           "%s: state %d %s differs" % (kind, i, k))
            expect(got["param_groups"] == full["param_groups"],
                   "%s: param_groups %s, want %s" % (kind, got["param_groups"],
                                                    full["param_groups"]))
        else:
            try:
                o2.state_dict()
                expect(False, "state_dict() off the target rank did not raise")
            except RuntimeError:
                pass
        # Re-shard the unsharded state into a fresh sharded optimizer; both go on equal.
        again = model_of(0)
        with torch.no_grad():
            for p, q in zip(again.parameters(), plain.parameters()):
                p.copy_(q)
        o3 = hvd.DistributedOptimizer(OPTIMIZERS[kind](again.parameters()),
                                      named_parameters=again.named_parameters(),
                                      shard="gradients")
        o3.load_state_dict(full)
        train(plain, o1, 5, seed=8)
        train(again, o3, 5, seed=8)
        d = max_diff(plain, again)
        expect(d <= TOL, "%s after load_state_dict: parameters differ by %g" % (kind, d))


def mode_bad():
    m = model_of(1)

    def raises(exc, words, make):
        try:
            make()
        except exc as e:
            for w in words:
                expect(w in str(e), "%r does not name %r" % (str(e), w))
            return
        expect(False, "no %s for %s" % (exc.__name__, words))

    raises(ValueError, ["shard", "'everything'"], lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(m.parameters(), lr=0.1), shard="everything"))
    raises(ValueError, ["LBFGS", "line search"], lambda: hvd.DistributedOptimizer(
        torch.optim.LBFGS(m.parameters()), shard="optimizer_state"))
    raises(ValueError, ["SparseAdam"], lambda: hvd.ZeroRedundancyOptimizer(
        list(m.parameters()), torch.optim.SparseAdam, lr=0.1))
    opt = hvd.DistributedOptimizer(torch.optim.Adam(m.parameters()), shard="optimizer_state")
    raises(RuntimeError, ["consolidate_state_dict"], opt.state_dict)


if __name__ == "__main__":
    hvd.init()
    for mode in sys.argv[1].split(","):
        before = failures
        {"equal": mode_equal, "state": mode_state, "bad": mode_bad}[mode]()
        if failures == before:
            print("[ok]", mode)
    hvd.shutdown()
    sys.exit(1 if failures else 0)
