#!/usr/bin/env python3
"""PyTorch twin of framework_bench: same models, data shape, batch and SGD step, prints samples/s.

    python3 framework/bench/pytorch_reference.py --model mlp|cnn --steps N --device cpu|cuda

Runs only where torch is installed; exits with status 2 and a message otherwise.
"""
import argparse
import sys
import time

try:
    import torch
    from torch import nn
except ImportError:
    print("pytorch_reference: torch is not installed", file=sys.stderr)
    sys.exit(2)


def build(model):
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                             nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = p.parse_args()
    torch.manual_seed(42)
    dev = torch.device(a.device)
    m = build(a.model).to(dev)
    x = torch.randn(a.batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(m(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # synchronises like framework_bench

    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    s = time.perf_counter() - t0
    print(f"model={a.model} device={a.device} batch={a.batch} steps={a.steps} time_s={s:.3f} "
          f"samples_per_s={a.steps * a.batch / s:.1f} loss={loss:.4f} torch={torch.__version__}")


if __name__ == "__main__":
    main()
