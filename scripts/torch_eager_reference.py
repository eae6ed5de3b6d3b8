#!/usr/bin/env python3
"""The main job (examples/train_fashion_mnist) in PyTorch eager, for a samples/s comparison on
the same GPU (scripts/gpu-check.sh runs it beside Kolo's built-in stack; issue 32).

    python3 torch_eager_reference.py --model mlp|cnn --batch-size N [--epochs 2]
        [--data-dir DIR] [--train-subset N] [--device cuda|cpu]

What matches the main job, step for step (examples/train_fashion_mnist/models.cc,
train_fashion_mnist.cc, train_steps.cc):
- the models: MLP 784-512-256-10 with ReLUs; CNN conv 1->16 3x3 pad 1, ReLU, max-pool 2,
  conv 16->32 3x3 pad 1, ReLU, max-pool 2, flatten (1568), linear 128, ReLU, linear 10; all
  with biases. The initialisation is PyTorch's own (irrelevant to the speed);
- the data: IDX .gz files read whole into host memory, pixels scaled to [0, 1] and normalised
  with the training set's mean 0.2860 and std 0.3530; each epoch a fresh shuffle; every batch
  gathered on the host and copied to the device (images and labels), the last partial batch
  kept;
- each step: zero_grad, forward, mean cross-entropy, backward, SGD (momentum 0.9) with the
  main job's learning rate (0.05, linear warm-up over half an epoch, then cosine to 0) set
  before the step; then the loss and the logits come back to the host for the epoch's loss and
  accuracy (the main job's EpochMeter does the same, so both synchronise once per step);
- the time of an epoch is its training loop only (no evaluation). It prints, per epoch,
  "epoch E/N: ... S samples/s"; gpu-check.sh compares epoch 2's (the first is warm-up: cuDNN
  and cuBLAS choose their algorithms, the caching allocator fills).
"""
import argparse
import gzip
import math
import struct
import sys
import time

import torch
from torch import nn

PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530


def read_idx(path, magic):
    """An IDX file (.gz) as a uint8 tensor shaped as its header says."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    got_magic, count = struct.unpack(">II", data[:8])
    if got_magic != magic:
        sys.exit(f"{path}: expected IDX magic {magic:#x}, got {got_magic:#x}")
    dims = [count]
    offset = 8
    if magic == 0x803:
        dims += list(struct.unpack(">II", data[8:16]))
        offset = 16
    want = math.prod(dims)
    if len(data) - offset != want:
        sys.exit(f"{path}: expected {want} bytes after the header, got {len(data) - offset}")
    return torch.frombuffer(bytearray(data[offset:]), dtype=torch.uint8).reshape(dims)


def load(data_dir, subset):
    images = read_idx(f"{data_dir}/train-images-idx3-ubyte.gz", 0x803)
    labels = read_idx(f"{data_dir}/train-labels-idx1-ubyte.gz", 0x801)
    if subset:
        if subset > images.shape[0]:
            sys.exit(f"--train-subset: expected at most {images.shape[0]}, got {subset}")
        images, labels = images[:subset], labels[:subset]
    x = (images.float().div_(255.0).sub_(PIXEL_MEAN).div_(PIXEL_STD)).unsqueeze(1).contiguous()
    return x, labels.long()


def make_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def lr_at(step, steps_per_epoch, epochs, base_lr=0.05, warmup_epochs=0.5):
    """The main job's plan with one rank (train_steps.cc LrPlan): linear warm-up from base_lr
    (the unscaled and scaled rates are equal on one rank, so the warm-up is flat), then cosine."""
    total = steps_per_epoch * epochs
    warmup = min(total, round(warmup_epochs * steps_per_epoch))
    if step < warmup:
        return base_lr
    decay = max(1, total - warmup)
    return 0.5 * base_lr * (1 + math.cos(math.pi * min(step - warmup, decay) / decay))


def train_epoch(model, opt, x, y, args, epoch, device):
    n = x.shape[0]
    steps_per_epoch = (n + args.batch_size - 1) // args.batch_size
    order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
    loss_sum, correct = 0.0, 0
    start = time.perf_counter()
    for step in range(steps_per_epoch):
        idx = order[step * args.batch_size:(step + 1) * args.batch_size]
        xb, yb = x[idx], y[idx]  # gathered on the host, as the main job's DataLoader does
        for group in opt.param_groups:
            group["lr"] = lr_at(epoch * steps_per_epoch + step, steps_per_epoch, args.epochs)
        opt.zero_grad()
        logits = model(xb.to(device))
        loss = nn.functional.cross_entropy(logits, yb.to(device))
        loss.backward()
        opt.step()
        loss_sum += loss.item() * xb.shape[0]
        correct += int((logits.detach().cpu().argmax(1) == yb).sum())
    seconds = time.perf_counter() - start
    return loss_sum / n, correct / n, seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn"], required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--train-subset", type=int, default=0)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    if args.batch_size < 1 or args.epochs < 1:
        sys.exit("--batch-size and --epochs: expected integers >= 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("torch_eager_reference: --device cuda: torch sees no CUDA device")
    device = torch.device(args.device)
    x, y = load(args.data_dir, args.train_subset)
    model = make_model(args.model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    print(f"torch {torch.__version__} eager: model {args.model}, batch {args.batch_size}, "
          f"{x.shape[0]} images, device {device}", flush=True)
    for epoch in range(args.epochs):
        loss, acc, seconds = train_epoch(model, opt, x, y, args, epoch, device)
        print(f"epoch {epoch + 1}/{args.epochs}: train loss {loss:.4f}  train acc {acc:.4f}  "
              f"{seconds:.1f} s  {x.shape[0] / seconds:.0f} samples/s", flush=True)


if __name__ == "__main__":
    main()
