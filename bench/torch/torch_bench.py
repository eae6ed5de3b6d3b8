"""Step time of the main job's CNN (examples/torch_python/train.py) on Fashion-MNIST, CPU, one
thread per rank: kolo.torch's DistributedOptimizer (--mode kolo), PyTorch DDP with gloo
(--mode ddp), or both in the same processes (--mode both), same model, data and batch. Run
under kolorun (DDP uses Kolo only to agree on a port). Rank 0 prints "<mode> step_time_ms
<median of --repeats windows>" per contender. See bench/torch/run.sh.

--mode both alternates windows of --steps steps between two copies of the model, one under each
contender, in one job: on a shared host the load drifts within seconds, and contenders measured
in separate runs (or one after the other) see different loads; interleaved windows see the same.
Its "ratio" line is the median over window pairs of kolo's time / DDP's."""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch_python"))
from train import Cnn, load  # noqa: E402

import kolo.torch as hvd  # noqa: E402


def init_gloo():
    port = None
    if hvd.rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = hvd.broadcast_object(port, name="port")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=hvd.rank(), world_size=hvd.size())


def contender(mode, bucket_size):
    """(name, net, optimizer) for one contender, on its own copy of the model."""
    torch.manual_seed(42)
    model = Cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if mode == "ddp":
        return mode, torch.nn.parallel.DistributedDataParallel(model), opt
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    extra = {} if bucket_size is None else {"bucket_size": bucket_size}
    return mode, model, hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                                 **extra)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["kolo", "ddp", "both"], required=True)
    p.add_argument("--steps", type=int, default=60, help="steps per window")
    p.add_argument("--repeats", type=int, default=3, help="timed windows per contender")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--bucket-size", type=int, default=None,
                   help="kolo: DistributedOptimizer's bucket_size in bytes (default its own)")
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    x, y = load("/usr/share/datasets/fashion-mnist", "train")
    if args.mode != "kolo":
        init_gloo()
    modes = ["kolo", "ddp"] if args.mode == "both" else [args.mode]
    contenders = [contender(m, args.bucket_size) for m in modes]
    bs, off = args.batch_size, hvd.rank() * args.batch_size
    windows = {m: [] for m in modes}
    for rep in range(args.repeats + 1):  # the first window of each warms up
        order = contenders if rep % 2 == 0 else contenders[::-1]
        for name, net, opt in order:
            start = time.perf_counter()
            for step in range(args.steps):
                b = off + ((rep * args.steps + step) * bs * hvd.size()) % (len(x) - bs * hvd.size())
                opt.zero_grad()
                F.cross_entropy(net(x[b:b + bs]), y[b:b + bs]).backward()
                opt.step()
            if rep:
                windows[name].append(1e3 * (time.perf_counter() - start) / args.steps)
    if hvd.rank() == 0:
        for m in modes:
            print("%s step_time_ms %.3f (windows %s)" % (
                m, statistics.median(windows[m]), " ".join("%.2f" % w for w in windows[m])))
        if args.mode == "both":
            ratios = [k / d for k, d in zip(windows["kolo"], windows["ddp"])]
            print("ratio kolo/ddp %.3f (windows %s)" % (statistics.median(ratios),
                                                       " ".join("%.2f" % r for r in ratios)))
    if args.mode != "kolo":
        dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
