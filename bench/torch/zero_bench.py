"""ZeRO stage 1 through kolo.torch against PyTorch 1.13's ZeroRedundancyOptimizer (gloo), same
model, data, batch and optimizer (Adam), in the same job (docs/zero-torch.md). Contenders:
  kolo       kolo.torch DistributedOptimizer(Adam, shard="optimizer_state") on the bare model
  kolo2      the same with shard="gradients"
  torch      DistributedDataParallel (gloo) + torch.distributed.optim.ZeroRedundancyOptimizer
  plain      kolo.torch DistributedOptimizer(Adam) unsharded (the reference for the bytes)
Windows of --steps steps alternate between the contenders (the order reversed every round): on
a shared host the load drifts within seconds, and interleaved windows see the same load. Rank 0
prints per contender the median step time and the optimizer state bytes of every rank, and
"ratio kolo/torch", the median over rounds of the two windows' ratio. Run under kolorun:
  OMP_NUM_THREADS=1 PYTHONPATH=build/python build/bin/kolorun -np 2 /usr/bin/python3 \\
      bench/torch/zero_bench.py --model mlp --repeats 8
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch_python"))
from train import Cnn, load  # noqa: E402

import kolo.torch as hvd  # noqa: E402
from kolo.torch import zero  # noqa: E402


def init_gloo():
    port = None
    if hvd.rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = hvd.broadcast_object(port, name="port")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=hvd.rank(), world_size=hvd.size())


def make_model(kind):
    torch.manual_seed(42)
    if kind == "cnn":
        return Cnn()
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 10))


def contender(name, kind, lr, bucket_size):
    """(name, net, optimizer, the torch optimizer whose .state holds this rank's state)."""
    model = make_model(kind)
    if name == "torch":
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
        return name, torch.nn.parallel.DistributedDataParallel(model), opt, opt.optim
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    shard = {"kolo": "optimizer_state", "kolo2": "gradients", "plain": None}[name]
    extra = {} if bucket_size is None else {"bucket_size": bucket_size}
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), shard=shard,
                                   **extra)
    return name, model, opt, opt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["cnn", "mlp"], default="mlp")
    p.add_argument("--contenders", default="kolo,torch,kolo2,plain")
    p.add_argument("--steps", type=int, default=20, help="steps per window")
    p.add_argument("--repeats", type=int, default=6, help="timed windows per contender")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--bucket-size", type=int, default=None,
                   help="kolo: DistributedOptimizer's bucket_size in bytes (default its own)")
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    init_gloo()
    x, y = load("/usr/share/datasets/fashion-mnist", "train")
    names = args.contenders.split(",")
    contenders = [contender(n, args.model, 1e-3, args.bucket_size) for n in names]
    bs, off = args.batch_size, hvd.rank() * args.batch_size
    windows = {n: [] for n in names}
    for rep in range(args.repeats + 1):  # the first window of each warms up
        order = contenders if rep % 2 == 0 else contenders[::-1]
        for name, net, opt, _ in order:
            start = time.perf_counter()
            for step in range(args.steps):
                b = off + ((rep * args.steps + step) * bs * hvd.size()) % (len(x) - bs * hvd.size())
                opt.zero_grad()
                F.cross_entropy(net(x[b:b + bs]), y[b:b + bs]).backward()
                opt.step()
            if rep:
                windows[name].append(1e3 * (time.perf_counter() - start) / args.steps)
    state = {n: hvd.allgather(torch.tensor([zero.state_bytes(inner)]),
                              name="bench.bytes." + n).tolist()
             for n, _, _, inner in contenders}
    if hvd.rank() == 0:
        params = sum(p.numel() for p in make_model(args.model).parameters())
        print("model %s parameters %d ranks %d batch %d steps/window %d windows %d"
              % (args.model, params, hvd.size(), bs, args.steps, args.repeats))
        for n in names:
            print("%s step_time_ms %.3f state_bytes_per_rank %s (windows %s)" % (
                n, statistics.median(windows[n]), state[n],
                " ".join("%.2f" % w for w in windows[n])))
        for a in names:
            if a == "torch" or "torch" not in names:
                continue
            ratios = [k / t for k, t in zip(windows[a], windows["torch"])]
            print("ratio %s/torch %.3f (windows %s)" % (a, statistics.median(ratios),
                                                       " ".join("%.2f" % r for r in ratios)))
    dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
