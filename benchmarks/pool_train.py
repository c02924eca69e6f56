"""Pooled training benchmarks: data-parallel steps on 1 vs 2 local worker processes, Monte-Carlo samples per
second on 1 vs 2, and a sharded / relayed step against the one-device sc.Run step. Prints a table.

    python benchmarks/pool_train.py [--steps 8]

Wall clock per step after one untimed warm-up step (Programs compiled on the workers). Workers run the
reference backend (numpy), so this measures the pool's overhead and parallelism on CPU cores, not a GPU.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

import scellis_jupyter as sc  # noqa: E402
from scellis_jupyter.pool import Pool  # noqa: E402
from scellis_jupyter.pool.montecarlo import simulate  # noqa: E402
from scellis_jupyter.pool.parallel import DataParallel  # noqa: E402
from scellis_jupyter.pool.sharding import RelayRun, ShardedRun  # noqa: E402

SPEC = """
name = "digits-wide"
[data]
dataset = "digits"
[model]
nodes = [
  { op = "linear", out = 512 }, { op = "relu" },
  { op = "linear", out = 512 }, { op = "relu" },
  { op = "linear", out = 10 },
]
[recipe]
optimizer = { name = "adam", lr = 1e-3 }
batch_size = 512
determinism = "debug"
"""


def per_step(it, steps: int) -> float:
    it = iter(it)
    next(it)                                  # warm-up: Programs compiled on the workers
    t = time.perf_counter()
    for _ in range(steps):
        next(it)
    return (time.perf_counter() - t) / steps


def pi(u):
    return 4.0 * ((u[:, 0] ** 2 + u[:, 1] ** 2) < 1.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4_000_000)
    a = ap.parse_args()
    rows = []
    run = sc.Run(SPEC, device="reference", steps=a.steps + 1)
    rows.append(("one-device sc.Run step (reference)", per_step(run, a.steps), "s/step"))
    for n in (1, 2):
        with Pool(workers=n) as p:
            rows.append((f"data-parallel step, {n} worker process(es), 2 slices",
                         per_step(DataParallel(p, SPEC, slices=2, steps=a.steps + 1), a.steps), "s/step"))
            simulate(p, pi, 10_000, k=2, shards=4)                            # warm
            t = time.perf_counter()
            simulate(p, pi, a.samples, k=2, shards=16)
            rows.append((f"Monte-Carlo, {n} worker process(es), 16 shards", a.samples / (time.perf_counter() - t),
                         "samples/s"))
            if n == 2:
                rows.append(("sharded optimizer state x2 step", per_step(ShardedRun(p, SPEC, count=2,
                                                                                  steps=a.steps + 1), a.steps), "s/step"))
                rows.append(("layer relay x2 step", per_step(RelayRun(p, SPEC, count=2, steps=a.steps + 1), a.steps),
                             "s/step"))
    w = max(len(r[0]) for r in rows)
    print(f"{'what':<{w}}  {'value':>12}  unit   (cpu cores: {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    for name, v, unit in rows:
        print(f"{name:<{w}}  {v:>12.4g}  {unit}")


if __name__ == "__main__":
    main()
