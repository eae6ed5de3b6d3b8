"""One rank of kolo.torch's Horovod-compatibility checks (torch_test.cc runs it on 2 ranks under
kolorun): what Horovod's own test suite asks of horovod.torch, in Kolo's words, with exact values.
  build      the build queries answer from Kolo's backend registry.
  grads      the collectives' gradients are Horovod's (Note [Collective gradients] in
             kolo/torch/__init__.py), for allreduce, grouped_allreduce, allgather,
             grouped_allgather, broadcast, alltoall, reducescatter and grouped_reducescatter.
  calls      grouped_allgather, grouped_reducescatter (and _async), sparse_allreduce_async,
             broadcast_object and allgather_object with a process set and a global root.
  errors     bad alltoall arguments raise ValueError (and KoloError); a broadcast's root outside
             the set names it; int16 is carried; a name in flight raises at the second call.
  optimizer  names without named_parameters are unique over several groups; sparse embedding
             gradients are averaged (sparse_as_dense or not); broadcast_optimizer_state on a new
             optimizer initialises its state; a rank outside the optimizer's set steps locally.
Prints "[ok] <part>" per part whose checks held, "FAIL ..." otherwise; exits 1 on a failure.
"""
import sys

import torch

import kolo.torch as hvd
from kolo.torch import _kolo_torch as _C

sys.stdout.reconfigure(line_buffering=True)
torch.set_num_threads(1)
failures = 0


def expect(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL", what)


def same(got, want, what):
    expect(torch.equal(got, want), "%s: got %s, want %s" % (what, got, want))


def part_build():
    names = _C.built_backend_names()
    expect(hvd.mpi_built() == ("mpi" in names), "mpi_built %r, backends %s" % (hvd.mpi_built(),
                                                                             names))
    expect(hvd.nccl_built() == (_C.NCCL_VERSION_CODE if "nccl" in names else 0),
           "nccl_built %r" % hvd.nccl_built())
    expect(("nccl" not in names) or hvd.nccl_built() >= 2000, "NCCL's version code %r" %
           hvd.nccl_built())
    expect(hvd.cuda_built() == ("nccl" in names), "cuda_built %r" % hvd.cuda_built())
    expect(hvd.mpi_threads_supported() == hvd.mpi_built(), "mpi_threads_supported")
    expect(not hvd.mpi_enabled(), "mpi_enabled under kolorun's default backend")
    for query in (hvd.gloo_built, hvd.gloo_enabled, hvd.ccl_built, hvd.ddl_built, hvd.rocm_built):
        expect(query() is False, "%s() is %r" % (query.__name__, query()))


def grad_of(fn, x, upstream):
    x = x.clone().requires_grad_()
    out = fn(x)
    out.backward(upstream)
    return x.grad


def part_grads(P, r):
    up = float(r + 1)  # this rank's upstream gradient: r + 1 everywhere
    tri = P * (P + 1) / 2.0
    x = torch.full((3,), 2.0)
    same(grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum), x, torch.full((3,), up)),
         torch.full((3,), tri), "allreduce Sum: the sum of the upstream gradients")
    same(grad_of(lambda t: hvd.allreduce(t), x, torch.full((3,), up)),
         torch.full((3,), tri / P), "allreduce Average: their average")
    a, b = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    ga, gb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    ((ga * up).sum() + (gb * 2 * up).sum()).backward()
    same(a.grad, torch.full((2,), tri), "grouped_allreduce [0]")
    same(b.grad, torch.full((3,), 2 * tri), "grouped_allreduce [1]")
    # allgather: rank q holds q + 1 rows; the upstream on rank k of q's rows is 10 (q + 1) + k,
    # so q's gradient is their average over k.
    ups = torch.cat([torch.full((q + 1, 2), 10.0 * (q + 1) + r) for q in range(P)])
    want = torch.full((r + 1, 2), 10.0 * (r + 1) + (P - 1) / 2.0)
    rows = torch.ones(r + 1, 2)
    same(grad_of(hvd.allgather, rows, ups), want, "allgather: own rows of the average")
    c = torch.ones(r + 1, 2, requires_grad=True)
    (g,) = hvd.grouped_allgather([c])
    g.backward(ups)
    same(c.grad, want, "grouped_allgather")
    for root in range(P):
        same(grad_of(lambda t: hvd.broadcast(t, root), x, torch.full((3,), up)),
             torch.full((3,), tri / P if r == root else 0.0), "broadcast from %d" % root)
    # alltoall: row k goes to rank k, whose upstream is k + 1.
    splits = torch.ones(P, dtype=torch.int32)
    t = torch.zeros(P, 2, requires_grad=True)
    out, received = hvd.alltoall(t, splits)
    same(received, torch.ones(P, dtype=torch.int32), "alltoall received splits")
    out.backward(torch.full((P, 2), up))
    same(t.grad, torch.arange(1.0, P + 1).repeat_interleave(2).reshape(P, 2), "alltoall")
    # reducescatter: rows 2k, 2k + 1 go to rank k; Horovod's gradient is the allgather of the
    # upstream, times P for Sum.
    want = torch.arange(1.0, P + 1).repeat_interleave(4).reshape(2 * P, 2)
    same(grad_of(lambda s: hvd.reducescatter(s, op=hvd.Sum), torch.ones(2 * P, 2),
                 torch.full((2, 2), up)), want * P, "reducescatter Sum")
    same(grad_of(lambda s: hvd.reducescatter(s), torch.ones(2 * P, 2),
                 torch.full((2, 2), up)), want, "reducescatter Average")
    d = torch.ones(2 * P, 2, requires_grad=True)
    (gd,) = hvd.grouped_reducescatter([d], op=hvd.Sum)
    gd.backward(torch.full((2, 2), up))
    same(d.grad, want * P, "grouped_reducescatter Sum")


def part_calls(P, r):
    outs = hvd.grouped_allgather([torch.full((r + 1,), float(r)), torch.full((1, 2), 5.0 + r)])
    same(outs[0], torch.cat([torch.full((q + 1,), float(q)) for q in range(P)]),
         "grouped_allgather [0]")
    same(outs[1], torch.stack([torch.full((2,), 5.0 + q) for q in range(P)]),
         "grouped_allgather [1]")
    h = hvd.grouped_reducescatter_async([torch.arange(2.0 * P), torch.ones(P, 3)], op=hvd.Sum)
    got = hvd.synchronize(h)
    same(got[0], torch.arange(2.0 * r, 2.0 * r + 2) * P, "grouped_reducescatter_async [0]")
    same(got[1], torch.full((1, 3), float(P)), "grouped_reducescatter_async [1]")
    got = hvd.synchronize(hvd.grouped_allgather_async([torch.full((1,), float(r))]))
    same(got[0], torch.arange(float(P)), "grouped_allgather_async")
    # Sparse: rank r's entries at rows r and P; the average equals the dense allreduce.
    dense = torch.zeros(P + 1, 2)
    dense[r] = r + 1.0
    dense[P] = 1.0
    got = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse", op=hvd.Average)()
    same(got.to_dense(), hvd.allreduce(dense, name="dense"), "sparse_allreduce_async")
    # One process set per rank: the object's root is a global rank.
    sets = [hvd.add_process_set([q]) for q in range(P)]
    mine = sets[r]
    expect(hvd.broadcast_object({"r": r}, root_rank=r, process_set=mine) == {"r": r},
           "broadcast_object in the set of rank %d" % r)
    expect(hvd.allgather_object(r * 10) == [q * 10 for q in range(P)], "allgather_object")
    same(hvd.broadcast(torch.full((2,), float(r)), root_rank=r, process_set=mine),
         torch.full((2,), float(r)), "broadcast with the set's global root")
    try:
        hvd.broadcast(torch.ones(2), root_rank=(r + 1) % P, process_set=mine)
        expect(False, "a root outside the set was accepted")
    except ValueError as e:
        expect("root_rank %d is not a member" % ((r + 1) % P) in str(e), "root error: %s" % e)
    for s in sets:
        hvd.remove_process_set(s)


def raises_value_error(fn, what, needle):
    try:
        fn()
        expect(False, "%s: no error" % what)
    except ValueError as e:
        expect(needle in str(e), "%s: %s" % (what, e))
        return e
    return None


def part_errors(P, r):
    e = raises_value_error(lambda: hvd.alltoall(torch.ones(P + 1)), "equal split, length P + 1",
                           "alltoall")
    expect(isinstance(e, hvd.KoloError), "the core's InvalidArgument is also a KoloError")
    raises_value_error(lambda: hvd.alltoall(torch.ones(P), torch.ones(P)), "float splits",
                       "splits must hold integers")
    raises_value_error(lambda: hvd.alltoall(torch.ones(P - 1), torch.ones(P, dtype=torch.int32)),
                       "splits past the first dimension", "alltoall")
    # int16 is carried (DataType::kInt16), as Horovod's allgather, broadcast and alltoall take it.
    t = torch.full((2,), r + 1, dtype=torch.int16)
    same(hvd.allgather(t, name="int16"),
         torch.cat([torch.full((2,), q + 1, dtype=torch.int16) for q in range(P)]),
         "int16 allgather")
    # A name still in flight on this rank raises at the second call (ValueError, as Horovod).
    first = hvd.allreduce_async(torch.ones(3), name="dup")
    raises_value_error(lambda: hvd.allreduce_async(torch.ones(3), name="dup"),
                       "a second 'dup' in flight", "already in flight")
    same(hvd.synchronize(first), torch.ones(3), "the first 'dup' completes")


def part_optimizer(P, r):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.SGD([{"params": model[0].parameters()},
                           {"params": model[1].parameters()}], lr=0.1, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt)
    names = sorted(opt._parameter_names.values())
    expect(names == ["allreduce.noname.%d.%d" % (i, j) for i in range(2) for j in range(2)],
           "generated names %s" % names)
    expect(len(opt.state) == 0, "a new optimizer has no state")
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    bufs = [opt.state[p]["momentum_buffer"] for p in model.parameters()]
    expect(len(bufs) == 4 and all(torch.equal(b, torch.zeros_like(b)) for b in bufs),
           "broadcast_optimizer_state initialised momentum buffers")
    inputs = [torch.tensor([[1, 2, 2]]), torch.tensor([[2, 3, 0]])]  # rank q's indices
    for sparse_as_dense in (False, True):
        torch.manual_seed(7)
        emb = torch.nn.Embedding(5, 2, sparse=True)
        want = torch.zeros(5, 2)
        for q in range(P):
            want.index_add_(0, inputs[q % 2].flatten(), torch.ones(3, 2))
        want /= P
        sopt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                        sparse_as_dense=sparse_as_dense)
        emb(inputs[r % 2]).sum().backward()
        sopt.synchronize()
        g = emb.weight.grad
        expect(g.is_sparse, "sparse_as_dense=%s: the reduced gradient is sparse" % sparse_as_dense)
        same(g.to_dense(), want, "sparse_as_dense=%s: average of the ranks" % sparse_as_dense)
        with sopt.skip_synchronize():
            sopt.step()
    # A set of rank 0 only: rank 0 reduces alone, the others step on their own gradients.
    only0 = hvd.add_process_set([0])
    lin = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(1.0)
    popt = hvd.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=1.0),
                                    named_parameters=lin.named_parameters(), process_set=only0)
    lin(torch.full((1, 2), float(r + 1))).sum().backward()
    popt.step()
    same(lin.weight.detach(), torch.full((1, 2), -float(r)), "step of a rank in or out of the set")
    hvd.remove_process_set(only0)


if __name__ == "__main__":
    hvd.init()
    P, r = hvd.size(), hvd.rank()
    for name, part in (("build", part_build), ("grads", lambda: part_grads(P, r)),
                       ("calls", lambda: part_calls(P, r)), ("errors", lambda: part_errors(P, r)),
                       ("optimizer", lambda: part_optimizer(P, r))):
        before = failures
        part()
        if failures == before:
            print("[ok]", name)
    hvd.shutdown()
    sys.exit(1 if failures else 0)
