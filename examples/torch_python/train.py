"""Data-parallel Fashion-MNIST in PyTorch with kolo.torch (Horovod's API): the main job's CNN
(examples/train_fashion_mnist) and SGD with momentum. The Kolo lines are marked "# Kolo".

    kolorun -np 2 /usr/bin/python3 examples/torch_python/train.py [--epochs N] [--max-steps N]

(PYTHONPATH=build/python when running from the build tree.)"""
import argparse
import gzip
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import kolo.torch as hvd  # Kolo

sys.stdout.reconfigure(line_buffering=True)


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def load(directory, split):
    """Images [N, 1, 28, 28] in [0, 1] and labels from Debian's gzip'd IDX files."""
    with gzip.open("%s/%s-images-idx3-ubyte.gz" % (directory, split)) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open("%s/%s-labels-idx1-ubyte.gz" % (directory, split)) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.from_numpy(images.copy()).float().div_(255).view(-1, 1, 28, 28)
    return x, torch.from_numpy(labels.copy()).long()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--test-subset", type=int, default=0, help="first N test images (0: all)")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd.init()  # Kolo
    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "t10k")
    torch.manual_seed(42)
    model = Cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),  # Kolo: lr * size
                                momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # Kolo
    optimizer = hvd.DistributedOptimizer(optimizer,  # Kolo
                                         named_parameters=model.named_parameters())
    sampler = torch.utils.data.distributed.DistributedSampler(  # Kolo: this rank's share
        torch.utils.data.TensorDataset(train_x, train_y), num_replicas=hvd.size(),
        rank=hvd.rank())
    steps, timed = 0, 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        indices = torch.tensor(list(iter(sampler)))
        losses = []
        for b in range(0, len(indices), args.batch_size):
            if steps == args.max_steps:
                break
            start = time.perf_counter()
            idx = indices[b:b + args.batch_size]
            optimizer.zero_grad()
            optimizer.set_local_batch_size(len(idx))  # Kolo: exact averaging of uneven batches
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            steps += 1
            if steps > 5:
                timed += time.perf_counter() - start
        with torch.no_grad():
            n = min(args.test_subset, len(test_x)) if args.test_subset > 0 else len(test_x)
            lo, hi = n * hvd.rank() // hvd.size(), n * (hvd.rank() + 1) // hvd.size()
            correct = (model(test_x[lo:hi]).argmax(1) == test_y[lo:hi]).sum()
        correct = hvd.allreduce(correct, op=hvd.Sum, name="test.correct")  # Kolo
        if hvd.rank() == 0:
            print("epoch %d: train loss %.4f, test accuracy %.4f" %
                  (epoch, sum(losses) / max(len(losses), 1), correct.item() / n))
    if hvd.rank() == 0 and steps > 5:
        print("step_time_ms %.3f over %d steps" % (1e3 * timed / (steps - 5), steps - 5))
    hvd.shutdown()  # Kolo


if __name__ == "__main__":
    main()
