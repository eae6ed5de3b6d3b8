"""Kolo: data-parallel training. The PyTorch plugin is kolo.torch (import kolo.torch as hvd)."""
