"""Quickstart: pick the best device, train a small MLP on synthetic data, show the loss falling.

(Planning and checkpointing join this script as the planner and store land.)
"""
from __future__ import annotations

import numpy as np

import scellis_jupyter as sc
from scellis_jupyter import ops


def main(steps: int = 60) -> float:
    from .cli import ensure_xdg_runtime_dir
    ensure_xdg_runtime_dir()
    dev = sc.device()
    try:
        return train(dev, steps)
    except sc.ScellisError as e:
        if dev.backend == "reference" or e.diagnostic.code != "kernel":
            raise
        print(f"{e.diagnostic.format()}\nscellis: the wgpu kernel set is incomplete (see issue notes); "
              f"running this quickstart on the labelled reference device instead.")
        return train(sc.device("reference"), steps)


def train(dev, steps: int) -> float:
    print(f"device: {dev}\n  chosen: {dev.choice}")
    sc.set_tier("debug")
    g = sc.rng.Generator(0)
    x_np = g.stream("data").normal((256, 8))
    w_true = g.stream("data").normal((8, 1))
    y_np = (np.tanh(x_np @ w_true) > 0).astype(np.int32).reshape(-1)
    init = g.stream("init")
    w1 = init.normal((32, 8)) * np.float32(0.35)
    w2 = init.normal((2, 32)) * np.float32(0.17)
    x, y = sc.tensor(x_np, device=dev), sc.tensor(y_np, device=dev)
    lr, loss_v, first = 0.5, float("nan"), None
    for step in range(steps):
        W1 = sc.tensor(w1, device=dev, requires_grad=True)
        W2 = sc.tensor(w2, device=dev, requires_grad=True)
        logits = ops.linear(ops.relu(ops.linear(x, W1)), W2)
        logp = ops.log_softmax(logits, -1)
        loss = -ops.gather(logp, 1, y.reshape(-1, 1)).mean()
        loss.backward()
        loss_v = loss.item()
        first = loss_v if first is None else first
        w1 = w1 - lr * W1.grad.numpy()
        w2 = w2 - lr * W2.grad.numpy()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:3d}  loss {loss_v:.4f}")
    if not loss_v < first:
        raise SystemExit(f"quickstart: the loss did not fall ({first:.4f} -> {loss_v:.4f}); please report this")
    print(f"loss fell from {first:.4f} to {loss_v:.4f} in {steps} SGD steps on {dev.backend}:{dev.name} "
          f"(tier {loss.tier})")
    return loss_v


if __name__ == "__main__":
    main()
