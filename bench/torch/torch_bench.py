"""Step time of the main job's CNN (examples/torch_python/train.py) on Fashion-MNIST, CPU, one
thread per rank: kolo.torch's DistributedOptimizer (--mode kolo) or PyTorch DDP with gloo
(--mode ddp), same model, data and batch. Run under kolorun (DDP uses Kolo only to agree on a
port). Rank 0 prints "step_time_ms <median of --repeats windows>". See bench/torch/run.sh."""
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["kolo", "ddp"], required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    x, y = load("/usr/share/datasets/fashion-mnist", "train")
    torch.manual_seed(42)
    model = Cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if args.mode == "kolo":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        net = model
    else:
        port = None
        if hvd.rank() == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        port = hvd.broadcast_object(port, name="port")
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                                rank=hvd.rank(), world_size=hvd.size())
        net = torch.nn.parallel.DistributedDataParallel(model)
    bs, off = args.batch_size, hvd.rank() * args.batch_size
    windows = []
    for rep in range(args.repeats + 1):  # the first window warms up
        start = time.perf_counter()
        for step in range(args.steps):
            b = off + ((rep * args.steps + step) * bs * hvd.size()) % (len(x) - bs * hvd.size())
            opt.zero_grad()
            F.cross_entropy(net(x[b:b + bs]), y[b:b + bs]).backward()
            opt.step()
        if rep:
            windows.append(1e3 * (time.perf_counter() - start) / args.steps)
    if hvd.rank() == 0:
        print("step_time_ms %.3f (windows %s)" % (statistics.median(windows),
                                                 " ".join("%.2f" % w for w in windows)))
    if args.mode == "ddp":
        dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
