"""Pool benchmarks: a CPU-bound sweep on 1 vs 2 local worker processes, and what each verification costs.

    python benchmarks/pool.py                 # writes the "pool" block of benchmarks/RESULTS.md
    python benchmarks/pool.py --no-write      # prints it

Wall clock of `Pool.run` only (workers started and warmed by one untimed run first). The sweep is real
short `sc.Run`s of a digits MLP on the reference device; the verification job is row-block matmul shards
(numpy) so every method, Freivalds' included, applies to the same work.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.kernels import write_results  # noqa: E402
from scellis_jupyter.pool import Job, Pool  # noqa: E402
from scellis_jupyter.pool.checks import false_accept_bound  # noqa: E402
from scellis_jupyter.pool.workloads import sweep  # noqa: E402

SPEC = """
name = "digits-bench"
[data]
dataset = "digits"
[model]
nodes = [{ op = "linear", out = 64 }, { op = "relu" }, { name = "logits", op = "linear", out = 10 }]
[recipe]
loss = "cross_entropy"
optimizer = { name = "adamw", lr = 3e-3 }
epochs = 4
batch_size = 64
metrics = ["accuracy"]
determinism = "debug"
seed = 0
"""


def matmul(p):
    return p["a"] @ p["b"]


def time_sweep(workers: int, cells: int, steps: int) -> float:
    grid = {"optimizer.lr": list(np.geomspace(1e-3, 1e-1, cells))}
    with Pool(workers=workers) as p:
        sweep(p, SPEC, grid={"optimizer.lr": [1e-3] * workers}, steps=2)          # warm: imports, plan caches
        t = time.perf_counter()
        r = sweep(p, SPEC, grid=grid, steps=steps)
        dt = time.perf_counter() - t
    assert len(r.value) == cells
    return dt


def time_verification(n: int, blocks: int, repeats: int) -> list[tuple]:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    rows = []
    methods = [("none", {}), ("reference", {}), ("spot", {"fraction": 0.25}), ("quorum", {"replicas": 2}),
               ("freivalds", {"rounds": 20})]
    with Pool(workers=2) as p:
        for method, kw in methods:
            job = Job(matmul, inputs={"a": a, "b": b}, partitioner="row_blocks", partition={"blocks": blocks},
                      reduction="concat_rows", verify=method, **kw)
            p.run(job)                                                              # warm
            ts, checked = [], 0
            for _ in range(repeats):
                t = time.perf_counter()
                r = p.run(job)
                ts.append(time.perf_counter() - t)
                checked += r.checked
            assert np.allclose(r.value, a @ b)
            rows.append((method, kw, float(np.median(ts)), checked / repeats))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--n", type=int, default=768, help="matrix size of the verification job")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("SCELLIS_DEVICE", "reference")
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):   # one core per worker process
        os.environ[v] = "1"
    load = os.getloadavg()[0]
    t1 = time_sweep(1, args.cells, args.steps)
    t2 = time_sweep(2, args.cells, args.steps)
    ver = time_verification(args.n, args.blocks, args.repeats)
    base = ver[0][2]
    key = "pool"
    lines = [f"<!-- BEGIN {key} -->", "### pool: sweep speed-up and verification cost", "",
             f"- date: {_dt.date.today().isoformat()}", f"- machine: {os.cpu_count()} CPUs shared with other jobs (1-min load average {load:.1f} at the start; "
             "above the CPU count the speed-up measures the neighbours, not the pool)",
             f"- sweep: {args.cells} cells x {args.steps} steps of a digits MLP (64 hidden) on the reference device, "
             "one worker process per worker, 1 thread each (BLAS threads 1); wall clock of Pool.run after a warm-up run", "",
             "| workers | sweep s | speed-up |", "|---:|---:|---:|",
             f"| 1 | {t1:.2f} | 1.00 |", f"| 2 | {t2:.2f} | {t1 / t2:.2f} |", "",
             f"- verification: {args.blocks} row-block shards of a {args.n}x{args.n} @ {args.n}x{args.n} float64 "
             f"matmul on 2 worker processes; median of {args.repeats} runs; checks run on the client",
             "", "| method | settings | s per job | vs none | shards checked per job |",
             "|---|---|---:|---:|---:|"]
    for method, kw, t, checked in ver:
        note = ", ".join(f"{k}={v}" for k, v in kw.items())
        if method == "freivalds":
            note += f" (false accept <= 2^-{kw['rounds']} = {false_accept_bound(kw['rounds']):.1e})"
        lines.append(f"| {method} | {note or '-'} | {t:.3f} | {t / base:.2f} | {checked:.1f} |")
    lines += ["", f"<!-- END {key} -->"]
    block = "\n".join(lines)
    if args.no_write:
        print(block)
    else:
        write_results([(key, block)])
        print(block)
        print("wrote benchmarks/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
