"""One rank of kolo.torch's tests (torch_test.cc runs it under kolorun). Modes:
  exact     P ranks with uneven local batches (SGD + momentum, 4 steps) equal one process on the
            union of the batches, computed in this same process; with the default bucket size
            one allreduce per step carries every gradient; with small buckets, two backward
            passes per step and fp16 compression, still the union's (Horovod sums passes).
  gloo      every collective equals torch.distributed with the gloo backend on the same inputs,
            in the same job, or a closed form where gloo has no such collective.
  overlap   the first layer's gradient hook sees allreduces already submitted and completed.
  mismatch  a shape mismatch raises KoloError on every rank, naming the tensor.
  process_set  (3+ ranks) a set of ranks 1.. (excluding rank 0): every collective with
            process_set gives the closed form on the members, DistributedOptimizer(process_set=)
            equals one process on the members' batches, rank 0 is refused naming the set.
  sampler   ElasticSampler in this process, sharding for simulated worlds: the epoch's
            permutation used exactly once and in order, with and without a re-shard to another
            world after any number of steps; the padding when the world does not divide the rest.
  state     TorchState on a fixed job: a commit/restore round trip of model, optimizer, sampler
            and attributes; sync from the rank with the most commits; elastic.run calls the
            function once; the exception classes and where a Horovod script finds them.
Modes may be combined, "exact,gloo". Prints "[ok] <mode>" per mode whose checks held, "FAIL ..."
otherwise.
"""
import os
import random
import socket
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import kolo.common.exceptions
import kolo.torch as hvd

sys.stdout.reconfigure(line_buffering=True)
torch.set_num_threads(1)
failures = 0


def expect(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL", what)


def mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8),
                               torch.nn.ReLU(), torch.nn.Linear(8, 3))


def rows_of(r):  # rank r holds r + 2 rows of each global batch
    begin = sum(q + 2 for q in range(r))
    return begin, begin + r + 2


def train_exact(P, r, passes=1, **options):
    """4 steps of SGD + momentum on the rows of rank r of P (of the process_set option, if
    any) against one process on the union; returns (largest parameter difference, the
    DistributedOptimizer)."""
    total = rows_of(P - 1)[1]
    if options.get("process_set") is None:
        model = mlp(100 + r)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    else:
        model = mlp(100)  # broadcast_parameters is global; the non-members do not train
    reference = mlp(100)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, **options)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(7)
    for _ in range(4):
        opt.zero_grad()
        ref_opt.zero_grad()
        for _ in range(passes):  # Horovod's backward_passes_per_step sums the passes
            x, y = torch.randn(total, 6), torch.randint(0, 3, (total,))
            b, e = rows_of(r)
            opt.set_local_batch_size(e - b)
            F.cross_entropy(model(x[b:e]), y[b:e]).backward()
            F.cross_entropy(reference(x), y).backward()
        opt.step()
        ref_opt.step()
    diff = max((p - q).abs().max().item()
               for p, q in zip(model.parameters(), reference.parameters()))
    return diff, opt


def mode_exact():
    P, r = hvd.size(), hvd.rank()
    diff, opt = train_exact(P, r)
    stats, buckets = opt.stats(), opt.bucket_names()
    print("max_diff %.3g hooks %d buckets %d allreduces %d" % (
        diff, opt.submitted_during_backward, len(buckets), stats["allreduces"]))
    expect(diff < 1e-5, "parameters differ from one process by %g" % diff)
    # Note [Buckets]: the MLP's 6 gradients (0.6 KB) fit one default bucket: one allreduce per
    # step (plus the sample count), submitted from the hook of the last gradient.
    expect(buckets == ["grad.bucket0(4.bias..0.weight)"], "buckets %s" % buckets)
    expect(stats["allreduces"] == 4 and stats["submitted_from_hooks"] == 4 * 6 and
           stats["submitted_at_step"] == 0, "per-step allreduces: %s" % stats)
    # The optimizer's state (momentum) is the same on every rank after a broadcast.
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    buf = next(iter(opt.state_dict()["state"].values()))["momentum_buffer"]
    expect(torch.equal(hvd.allreduce(buf, op=hvd.Max), hvd.allreduce(buf, op=hvd.Min)),
           "momentum buffers differ between ranks")
    # Small buckets (several allreduces per step), two passes per step, fp16 on the wire.
    diff, opt = train_exact(P, r, passes=2, compression=hvd.Compression.fp16,
                            bucket_size=200)
    buckets = opt.bucket_names()
    print("passes 2 fp16 max_diff %.3g buckets %d" % (diff, len(buckets)))
    expect(diff < 2e-2, "two passes, fp16: parameters differ from one process by %g" % diff)
    expect(1 < len(buckets) < 6 and opt.stats()["allreduces"] == 4 * len(buckets),
           "small buckets: %s, %s" % (buckets, opt.stats()))
    check_no_sync(P, r)
    # A second pass before step() is refused: its gradient would race with the allreduce.
    model = mlp(5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    model(torch.randn(2, 6)).sum().backward()
    try:
        model(torch.randn(2, 6)).sum().backward()
        expect(False, "a second pass with backward_passes_per_step=1 did not raise")
    except RuntimeError as e:
        expect("more than backward_passes_per_step (1)" in str(e), "second pass: %s" % e)
    try:
        opt.zero_grad()
        expect(False, "zero_grad() between backward and step did not raise")
    except AssertionError:
        pass
    opt.synchronize()
    for bad, what in [({"compression": hvd.Compressor}, "compression"), ({"op": hvd.Max}, "op")]:
        try:
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), **bad)
            expect(False, "DistributedOptimizer accepted a bad %s" % what)
        except ValueError as e:
            expect(what in str(e), "bad %s: %s" % (what, e))


def check_no_sync(P, r):
    """A pass under no_sync() then a synchronised pass: no communication for the first, and the
    step's gradient is the sum of both passes' gradients of the union (equal batches per rank)."""
    model, reference = mlp(11), mlp(11)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    torch.manual_seed(8)
    for _ in range(2):
        opt.zero_grad()
        ref_opt.zero_grad()
        for local in (True, False):
            x, y = torch.randn(3 * P, 6), torch.randint(0, 3, (3 * P,))
            before = opt.stats()["allreduces"]
            if local:
                with opt.no_sync():
                    F.cross_entropy(model(x[3 * r:3 * r + 3]), y[3 * r:3 * r + 3]).backward()
                expect(opt.stats()["allreduces"] == before, "no_sync() communicated")
            else:
                F.cross_entropy(model(x[3 * r:3 * r + 3]), y[3 * r:3 * r + 3]).backward()
            F.cross_entropy(reference(x), y).backward()
        opt.step()
        ref_opt.step()
    diff = max((p - q).abs().max().item()
               for p, q in zip(model.parameters(), reference.parameters()))
    expect(diff < 1e-5, "no_sync: parameters differ from one process by %g" % diff)


def init_gloo():
    port = None
    if hvd.rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = hvd.broadcast_object(port, root_rank=0, name="gloo.port")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=hvd.rank(), world_size=hvd.size())


def same(got, want, what):
    ok = got.shape == want.shape and got.dtype == want.dtype and torch.equal(got, want)
    expect(ok, "%s: kolo %s, gloo %s" % (what, got, want))


def mode_gloo():
    init_gloo()
    P, r = hvd.size(), hvd.rank()
    gen = torch.Generator().manual_seed(1000 + r)
    ops = [(hvd.Sum, dist.ReduceOp.SUM), (hvd.Min, dist.ReduceOp.MIN),
           (hvd.Max, dist.ReduceOp.MAX), (hvd.Product, dist.ReduceOp.PRODUCT)]
    for dtype in [torch.float32, torch.float64, torch.int32, torch.int64, torch.int8,
                  torch.uint8]:
        x = (torch.rand(5, 3, generator=gen) * 4).to(dtype)
        for kop, gop in ops:
            want = x.clone()
            dist.all_reduce(want, op=gop)
            same(hvd.allreduce(x, op=kop), want, "allreduce %s %s" % (kop, dtype))
            inplace = x.clone()
            hvd.allreduce_(inplace, op=kop)
            same(inplace, want, "allreduce_ %s %s" % (kop, dtype))
        if dtype.is_floating_point:
            want = x.clone()
            dist.all_reduce(want)
            got = hvd.allreduce(x, op=hvd.Average)
            expect(torch.allclose(got, want / P), "allreduce average %s" % dtype)
        gathered = [torch.empty_like(x) for _ in range(P)]
        dist.all_gather(gathered, x)
        same(hvd.allgather(x), torch.cat(gathered), "allgather %s" % dtype)
        want = x.clone()
        dist.broadcast(want, src=P - 1)
        same(hvd.broadcast(x, root_rank=P - 1), want, "broadcast %s" % dtype)
        # Alltoall with equal shares (gloo's all_to_all_single) and with splits.
        a = (torch.rand(2 * P, 3, generator=gen) * 9).to(dtype)
        want = torch.empty_like(a)
        dist.all_to_all_single(want, a)
        same(hvd.alltoall(a), want, "alltoall %s" % dtype)
        splits = [j + 1 for j in range(P)]
        a = (torch.rand(sum(splits), 2, generator=gen) * 9).to(dtype)
        want = torch.empty(P * (r + 1), 2, dtype=dtype)
        dist.all_to_all_single(want, a, output_split_sizes=[r + 1] * P,
                               input_split_sizes=splits)
        got, received = hvd.alltoall(a, splits=torch.tensor(splits))
        same(got, want, "alltoall splits %s" % dtype)
        expect(received.tolist() == [r + 1] * P, "alltoall received splits")
        # Reducescatter: gloo has none in 1.13; its allreduce, then rank r's share of rows.
        s = (torch.rand(P + 1, 2, generator=gen) * 4).to(dtype)
        want = s.clone()
        dist.all_reduce(want)
        lo = r * ((P + 1) // P) + min(r, (P + 1) % P)
        n = (P + 1) // P + (1 if r < (P + 1) % P else 0)
        same(hvd.reducescatter(s, op=hvd.Sum), want[lo:lo + n], "reducescatter %s" % dtype)
    # Float16 and bfloat16 (gloo reduces neither here): closed forms.
    for dtype in [torch.float16, torch.bfloat16]:
        got = hvd.allreduce(torch.full((4,), r + 1.0, dtype=dtype), op=hvd.Sum)
        same(got, torch.full((4,), P * (P + 1) / 2, dtype=dtype), "allreduce %s" % dtype)
    # Grouped allreduce (async handles), compression, and a non-contiguous tensor.
    ts = [torch.rand(3, generator=gen), torch.rand(2, 2, generator=gen)]
    wants = [t.clone() for t in ts]
    for w in wants:
        dist.all_reduce(w)
    h = hvd.grouped_allreduce_async(ts, op=hvd.Sum)
    hvd.barrier()
    for got, want in zip(hvd.synchronize(h), wants):
        expect(torch.allclose(got, want), "grouped_allreduce")
    c = hvd.allreduce(torch.full((3,), 0.5 * (r + 1)), op=hvd.Sum,
                      compression=hvd.Compression.fp16)
    same(c, torch.full((3,), 0.5 * P * (P + 1) / 2), "allreduce fp16 compression")
    nc = torch.arange(6.0).reshape(2, 3).t() * (r + 1)
    want = nc.clone()
    dist.all_reduce(want)
    hvd.allreduce_(nc, op=hvd.Sum)
    same(nc, want, "allreduce_ non-contiguous")
    expect(hvd.poll(hvd.allreduce_async(torch.ones(1), name="poll")) in (True, False), "poll")
    hvd.join()
    try:
        hvd.allreduce(torch.zeros(2, dtype=torch.bool), name="flags")
        expect(False, "bool allreduce did not raise")
    except hvd.KoloError as e:
        expect("'flags'" in str(e) and "Bool" in str(e), "bool refusal message: %s" % e)
    dist.destroy_process_group()


def mode_overlap():
    model = mlp(3)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), bucket_size=0)
    seen = {}

    def first_layer_hook(grad):  # runs at the end of backward: the first layer is last
        handles = opt._reducer.submitted_handles()
        seen["submitted"] = len(handles)
        seen["completed"] = bool(handles) and handles[0].wait() is not None
        return grad

    model[0].weight.register_hook(first_layer_hook)
    model(torch.randn(4, 6)).sum().backward()
    opt.step()
    print("overlap submitted_during_backward %d completed %d" % (seen["submitted"],
                                                                  seen["completed"]))
    expect(seen["submitted"] >= 2, "allreduces submitted before backward reached layer 0")
    expect(seen["completed"], "an allreduce completed during backward")


def mode_mismatch():
    try:
        hvd.allreduce(torch.ones(hvd.rank() + 2), name="layer3.weight.grad")
        expect(False, "mismatched allreduce succeeded")
    except hvd.KoloError as e:
        print("error:", type(e).__name__, e)
        expect("layer3.weight.grad" in str(e), "the error names the tensor")


def mode_process_set():
    P, r = hvd.size(), hvd.rank()
    expect(P >= 3, "process_set needs 3 or more ranks")
    g = hvd.global_process_set
    expect((g.process_set_id, g.size(), g.rank(), g.ranks, g.included()) ==
           (0, P, r, list(range(P)), True), "global set: %s" % g)
    ps = hvd.add_process_set(range(1, P))  # every rank but 0
    M, k = P - 1, r - 1  # members, this rank's set rank
    expect((ps.process_set_id, ps.size(), ps.rank(), ps.ranks, ps.included()) ==
           (1, M, k, list(range(1, P)), r > 0), "set of ranks 1..: %s rank %s" % (ps, ps.rank()))
    if r == 0:
        try:
            hvd.allreduce(torch.ones(2), name="outside", process_set=ps)
            expect(False, "rank 0 allreduced on a set without it")
        except hvd.KoloError as e:
            expect("rank 0 is not in process set 1" in str(e), "non-member: %s" % e)
    else:
        # Closed forms over the members: set rank k holds k + 1 everywhere.
        v = float(k + 1)
        tri = M * (M + 1) / 2
        same(hvd.allreduce(torch.full((3,), v), op=hvd.Sum, process_set=ps),
             torch.full((3,), tri), "set allreduce sum")
        same(hvd.allreduce(torch.full((3,), v), process_set=ps), torch.full((3,), tri / M),
             "set allreduce average")
        t = torch.full((2, 2), v)
        hvd.allreduce_(t, op=hvd.Max, process_set=ps)
        same(t, torch.full((2, 2), float(M)), "set allreduce_ max")
        got = hvd.grouped_allreduce([torch.full((2,), v), torch.full((3,), 2 * v)], op=hvd.Sum,
                                    process_set=ps)
        same(got[0], torch.full((2,), tri), "set grouped_allreduce [0]")
        same(got[1], torch.full((3,), 2 * tri), "set grouped_allreduce [1]")
        same(hvd.allgather(torch.full((k + 1, 2), v), process_set=ps),
             torch.cat([torch.full((q + 1, 2), q + 1.0) for q in range(M)]), "set allgather")
        # root_rank: the last member's GLOBAL rank (Horovod's meaning).
        same(hvd.broadcast(torch.full((4,), v), root_rank=ps.ranks[M - 1], process_set=ps),
             torch.full((4,), float(M)), "set broadcast from the last member")
        a = torch.arange(2.0 * M).reshape(M, 2) + 100 * k  # row j goes to set rank j
        same(hvd.alltoall(a, process_set=ps),
             torch.stack([torch.tensor([2.0 * k, 2.0 * k + 1]) + 100 * q for q in range(M)]),
             "set alltoall")
        s = torch.arange(2.0 * M) * v  # 2 elements per member
        same(hvd.reducescatter(s, op=hvd.Sum, process_set=ps),
             torch.arange(2.0 * k, 2.0 * k + 2) * tri, "set reducescatter")
        hvd.barrier(process_set=ps)
        expect(hvd.broadcast_object({"from": r}, root_rank=1, process_set=ps) == {"from": 1},
               "set broadcast_object")
        # Gradients averaged over the members only equal one process on their batches.
        diff, opt = train_exact(M, k, process_set=ps)
        print("process_set max_diff %.3g" % diff)
        expect(diff < 1e-5, "set training differs from one process by %g" % diff)
    # The global set works beside it, and the set goes away on every rank.
    # (Named: the members' unnamed operations advanced their counters, not rank 0's.)
    same(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="global.after"),
         torch.full((1,), float(P)), "global after")
    expect(hvd.remove_process_set(ps) and ps.process_set_id is None, "remove_process_set")
    expect(not hvd.remove_process_set(hvd.global_process_set), "the global set stays")
    try:
        hvd.allreduce(torch.ones(1), process_set=ps)
        expect(False, "a removed set was usable")
    except ValueError as e:
        expect("was not added" in str(e), "removed set: %s" % e)


def samplers(n, world, epoch=0, processed_num=0, shuffle=True):
    """One ElasticSampler per rank of a simulated world of `world` ranks."""
    out = []
    for r in range(world):
        s = hvd.elastic.ElasticSampler(list(range(n)), shuffle=shuffle, seed=5)
        s.load_state_dict({"epoch": epoch, "processed_num": processed_num})
        s._shard(world, r)
        out.append(s)
    return out


def consume(shards, steps, batch):
    """What `steps` steps of the world take (each rank `batch` of its shard), in position
    order: step by step, within a step sample by sample, rank by rank. Records the batches."""
    taken = []
    for step in range(steps):
        for j in range(batch):
            for s in shards:
                if step * batch + j < len(s):
                    taken.append(s.get_indices(step, batch)[j])
        for s in shards:
            s.record_batch(step, batch)
    return taken


def mode_sampler():
    n, batch = 24, 2
    order = hvd.elastic.ElasticSampler(list(range(n)), seed=5).epoch_order()
    want = list(range(n))
    random.Random(5).shuffle(want)  # Horovod's permutation for seed 5, epoch 0
    expect(order == want, "epoch 0's order %s, Horovod's %s" % (order, want))
    for world in (1, 2, 3, 4):
        shards = samplers(n, world)
        expect([len(s) for s in shards] == [n // world] * world, "lengths %d ranks" % world)
        expect(consume(shards, n // world // batch, batch) == order,
               "%d ranks without a re-shard: not the epoch's order" % world)
    # A re-shard from 3 ranks to 2, 4, 1 (and 2 to 3) after every possible number of steps:
    # the samples used are the epoch's order, each once; padding only where the world does not
    # divide the rest, and then exactly the first W - rest % W of the rest again.
    for old, new in ((3, 2), (3, 4), (3, 1), (2, 3)):
        for steps in range(n // (old * batch) + 1):
            before = consume(samplers(n, old), steps, batch)
            state = {"epoch": 0, "processed_num": steps * batch * old}
            shards = samplers(n, new, **state)
            rest = n - len(before)
            expect(all(len(s) == -(-rest // new) for s in shards), "re-shard lengths")
            after = consume(shards, -(-len(shards[0]) // batch), batch)
            pad = -rest % new
            got = before + after
            ok = got == order + order[len(before):len(before) + pad]
            expect(ok, "%d -> %d ranks after %d steps: %s" % (old, new, steps, got))
            if pad == 0:
                expect(sorted(got) == list(range(n)), "%d -> %d after %d steps: not once" % (
                    old, new, steps))
    # Fewer samples left than ranks: padded cyclically, every rank gets one.
    shards = samplers(5, 4, processed_num=4)
    last = shards[0].epoch_order()[4]
    expect([list(s) for s in shards] == [[last]] * 4, "1 sample left, 4 ranks")
    # A new epoch: another permutation, nothing used; unshuffled: the identity.
    s = samplers(n, 2, processed_num=8)[0]
    s.set_epoch(1)
    expect(s.processed_num == 0 and s.epoch_order() != order and len(s) == n // hvd.size(),
           "set_epoch")
    expect(samplers(6, 2, shuffle=False)[1].indices == [1, 3, 5], "no shuffle")
    s.record_indices([0, 1, 2])  # Horovod's older name: a batch of 3 on every rank
    expect(s.state_dict() == {"epoch": 1, "processed_num": 3 * hvd.size()}, "record_indices")


def small_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def params_of(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def train_one(model, opt, seed):
    torch.manual_seed(seed)
    opt.zero_grad()
    model(torch.randn(4, 3)).sum().backward()
    opt.step()


def mode_state():
    P, r = hvd.size(), hvd.rank()
    expect(hvd.elastic.run is not None and hvd.elastic.TorchState and hvd.elastic.ElasticSampler,
           "hvd.elastic names")
    for cls in (hvd.HorovodInternalError, hvd.HostsUpdatedInterrupt):
        expect(issubclass(cls, hvd.KoloError) and issubclass(cls, RuntimeError),
               "%s is a KoloError" % cls.__name__)
    expect(kolo.common.exceptions.HorovodInternalError is hvd.elastic.HorovodInternalError and
           kolo.common.exceptions.HostsUpdatedInterrupt is hvd.HostsUpdatedInterrupt and
           hvd.HostsUpdatedInterrupt.skip_sync is False, "exception names")
    expect(not hvd.elastic.enabled() and hvd.elastic.generation() == -1, "not elastic")
    expect(hvd.allgather_object({"r": r}) == [{"r": q} for q in range(P)], "allgather_object")

    # Commit / restore round trip, local (a fixed job's commit does not communicate).
    model = small_model(10 + r)  # different on every rank
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = hvd.elastic.ElasticSampler(list(range(12)), seed=1)
    train_one(model, opt, 1)
    state = hvd.elastic.TorchState(model, opt, train_sampler=sampler, epoch=3, batch=7,
                                   history=[1, 2])
    expect(state.model is model and state.optimizer is opt and state.epoch == 3, "attributes")
    sampler.record_batch(0, 2)
    state.commit()
    saved_params = params_of(model).clone()
    saved_momentum = [v["momentum_buffer"].clone() for v in opt.state_dict()["state"].values()]
    train_one(model, opt, 2)
    state.epoch, state.batch = 4, 0
    state.history.append(3)
    sampler.record_batch(1, 2)
    expect(not torch.equal(params_of(model), saved_params), "a step changed the parameters")
    state.restore()
    momentum = [v["momentum_buffer"] for v in opt.state_dict()["state"].values()]
    expect(torch.equal(params_of(model), saved_params), "restore: parameters")
    expect(all(torch.equal(a, b) for a, b in zip(momentum, saved_momentum)) and
           len(momentum) == 2, "restore: momentum")
    expect((state.epoch, state.batch, state.history) == (3, 7, [1, 2]), "restore: attributes")
    expect(sampler.state_dict() == {"epoch": 0, "processed_num": 2 * P}, "restore: sampler")
    expect(state.commits == 1, "commits %d" % state.commits)

    # Sync: the last rank committed most, so every rank takes its commit, whole.
    if r == P - 1:
        train_one(model, opt, 3)
        state.epoch = 9
        sampler.record_batch(1, 2)
        state.commit()
        state.commit()
    last = hvd.broadcast_object((params_of(model), state.epoch), root_rank=P - 1,
                                name="test.last")
    state.sync()
    expect(torch.equal(params_of(model), last[0]) and state.epoch == last[1] == 9,
           "sync: the newest commit's parameters and epoch")
    expect(state.commits == 3 and sampler.state_dict() == {"epoch": 0, "processed_num": 4 * P},
           "sync: commits %d, sampler %s" % (state.commits, sampler.state_dict()))
    momentum = [v["momentum_buffer"] for v in opt.state_dict()["state"].values()]
    expect(torch.equal(hvd.allreduce(momentum[0], op=hvd.Max, name="test.m.max"),
                       hvd.allreduce(momentum[0], op=hvd.Min, name="test.m.min")),
           "sync: momentum equal on every rank")
    state.epoch = 11
    state.restore()  # what sync took is the commit now
    expect(state.epoch == 9 and torch.equal(params_of(model), last[0]), "restore after sync")

    # restore() drops a DistributedOptimizer's unfinished step (as after a lost peer): the next
    # step counts its passes afresh and equals one process's step.
    model, reference = small_model(30), small_model(30)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    interrupted = hvd.elastic.TorchState(model, opt)
    interrupted.commit()
    model(torch.ones(2, 3)).sum().backward()
    in_flight = opt._reducer.submitted_handles()
    expect(opt._reducer.pending() and len(in_flight) == 1, "a submitted bucket")
    interrupted.restore()
    expect(not opt._reducer.pending(), "restore: the step was not dropped")
    for h in in_flight:
        h.wait()  # here the world is whole: let it finish before zeroing what it writes
    opt.zero_grad()
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(torch.ones(2, 3)).sum().backward()
    ref_opt.step()
    expect(torch.equal(params_of(model), params_of(reference)), "the step after restore")

    # run(): a fixed job syncs (nobody committed: rank 0's values) and calls the function once.
    fresh = small_model(20 + r)
    zero = hvd.broadcast_object(params_of(fresh), root_rank=0, name="test.zero")
    calls = []

    @hvd.elastic.run
    def train(state, arg):
        calls.append(arg)
        return params_of(state.model)

    got = train(hvd.elastic.TorchState(fresh, None, epoch=0), "x")
    expect(calls == ["x"] and torch.equal(got, zero), "run: calls %s" % calls)

    check_run_loop()

    @hvd.elastic.run(reset_limit=0)
    def mismatch(state):
        hvd.allreduce(torch.ones(r + 1), name="test.mismatch")

    try:
        mismatch(hvd.elastic.TorchState(epoch=0))
        expect(False, "a mismatch inside run() did not raise")
    except hvd.HorovodInternalError as e:
        expect(False, "a mismatch is not a world change: %s" % e)
    except hvd.KoloError as e:
        expect(str(e).startswith("Mismatch: "), "run: mismatch %s" % e)
    try:
        hvd.elastic.run(lambda s: None, reset_limit=-1)(hvd.elastic.TorchState())
        expect(False, "reset_limit=-1 accepted")
    except ValueError as e:
        expect("reset_limit" in str(e), "reset_limit: %s" % e)


def check_run_loop():
    """run()'s answers to the two exceptions, on every rank alike, with the world's re-forming
    stubbed out (a fixed job cannot re-form; the real one: TorchPython.ElasticScript*)."""
    el = hvd.elastic
    real = (el.enabled, el._reform)
    reforms = []
    el.enabled = lambda: True
    el._reform = lambda: reforms.append(hvd.size())
    try:
        state = el.TorchState(small_model(40), None, epoch=0)
        at_reset, calls = [], []
        state.register_reset_callbacks([lambda: at_reset.append(state.epoch)])

        @el.run
        def flaky(state):
            calls.append(state.epoch)
            if len(calls) == 1:
                state.epoch = 1
                state.commit()
                state.epoch = 2  # not committed: rolled back
                raise hvd.HorovodInternalError("PeerFailure: stub")
            if len(calls) == 2:
                state.epoch = 3  # not rolled back: Horovod restores after a lost peer only
                raise hvd.HostsUpdatedInterrupt("WorldChanged: stub")
            return "done"

        got = flaky(state)
        expect(got == "done" and calls == [0, 1, 3] and at_reset == [1, 3] and
               len(reforms) == 2, "run loop: %s %s %s %s" % (got, calls, at_reset, reforms))

        @el.run(reset_limit=2)
        def hopeless(state):
            raise hvd.HorovodInternalError("PeerFailure: stub")

        del reforms[:]
        try:
            hopeless(state)
            expect(False, "run() went on past its reset limit")
        except hvd.HorovodInternalError as e:
            expect(len(reforms) == 2 and
                   "re-forming the world 2 times: the reset limit" in str(e),
                   "reset limit: %s after %d" % (e, len(reforms)))
        # A re-form that fails with a world change (superseded while joining) is retried.
        attempts = []

        def reform_once_superseded():
            attempts.append(1)
            if len(attempts) == 1:
                raise hvd.HorovodInternalError("Aborted: stub: generation 1 was superseded")

        el._reform = reform_once_superseded
        calls.clear()
        expect(flaky(state) == "done" and len(attempts) == 3 and len(calls) == 3,
               "a failed re-form: %d attempts, %d calls" % (len(attempts), len(calls)))
        # Without reset_limit: KOLO_ELASTIC_RESET_LIMIT as kolo::init() parsed it (unset here).
        expect(el._reset_limit(None) == 100, "default reset limit %r" % el._reset_limit(None))
    finally:
        el.enabled, el._reform = real


if __name__ == "__main__":
    # Several modes in one job ("exact,gloo"): each launch pays for importing torch.
    hvd.init()
    for mode in sys.argv[1].split(","):
        before = failures
        {"exact": mode_exact, "gloo": mode_gloo, "overlap": mode_overlap,
         "mismatch": mode_mismatch, "process_set": mode_process_set,
         "sampler": mode_sampler, "state": mode_state}[mode]()
        if failures == before:
            print("[ok]", mode)
    hvd.shutdown()
    sys.exit(1 if failures else 0)
