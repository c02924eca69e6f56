"""Pool over GPUs: the GPT-style benchmark model trained data-parallel through a Pool whose workers are each
bound to a wgpu adapter (reductions on workers), beside the single-device run of the same spec and seed.

Prints, per worker count: samples/s, and the worker seconds per step (summed over workers, from Dask's task
stream) spent in the slices' gradient tasks (device readback included), the gradient tree reduction (compute
and transfer of its tasks), the update tasks and all transfers between workers; then the largest loss gap to
the single-device run over the measured steps against the declared tolerance. Then the sharded-state demo: a model sized so
its plan is red on one device of the declared memory (default: half of the adapter's) and green with its
optimizer state sharded over two, planned at that memory and run for real over two workers at `--run-memory`
(the weights travel through the host each step, so a run at half of a large card is planned, not run).
Workers outnumbering adapters share them (adapter index modulo the count): the table says so.

    python benchmarks/pool_gpu.py                       # GPT-style model, 1 and 2 workers
    python benchmarks/pool_gpu.py --small --steps 3     # a tiny GPT for a software adapter (llvmpipe)
Writes nothing.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

GPT_FILE = ROOT / "benchmarks" / "specs" / "plan_only" / "gpt_bench.toml"   # training.py's MODELS["gpt"]
LOSS_RTOL = 1e-3          # declared: data-parallel loss vs the single-device loss, relative, every measured step


def gpt_spec(small: bool) -> str:
    """The GPT benchmark spec, tier prod, seed 0; `small`: 2 blocks, width 64, 2 heads, seq 32, batch 8."""
    text = re.sub(r'\ndeterminism = "[a-z]+"', "", GPT_FILE.read_text())   # the bench spec may name a tier
    text = text.replace("batch_size = 64", "batch_size = 64\ndeterminism = \"prod\"\nseed = 0")
    if small:
        blocks = text.count("transformer_block")
        text = text.replace('  { op = "transformer_block", heads = 6, causal = true },\n', "", blocks - 2)
        text = text.replace("heads = 6", "heads = 2").replace("dim = 384", "dim = 64")
        text = text.replace("seq_len = 256", "seq_len = 32").replace("max_len = 256", "max_len = 32")
        text = text.replace("batch_size = 64", "batch_size = 8")
        text = re.sub(r'name = "gpt-bench"', 'name = "gpt-bench-small"', text)
    return text


def single_device(spec: str, device: str, warmup: int, steps: int) -> dict:
    import scellis_jupyter as sc
    from scellis_jupyter.pool.devices import resolve
    run = sc.Run(spec, device=resolve(device), steps=warmup + steps + 1)
    it = iter(run)
    for _ in range(warmup):
        next(it)
    t = time.perf_counter()
    for _ in range(steps):        # not to the end: a Run's last step evaluates and records, not timed here
        next(it)
    dt = time.perf_counter() - t
    return {"losses": list(run.loss_history)[:warmup + steps], "samples_s": run.batch_size * steps / dt, "batch": run.batch_size,
            "device": run.device}


def pooled(spec: str, workers: int, devices: list, slices: int, warmup: int, steps: int, processes: bool) -> dict:
    from distributed import get_task_stream

    from scellis_jupyter.pool import Pool
    from scellis_jupyter.pool.parallel import DataParallel
    with Pool(workers=workers, processes=processes) as pool:
        dp = DataParallel(pool, spec, slices=slices, steps=warmup + steps, devices=devices)
        info = dp.devices()
        it = iter(dp)
        for _ in range(warmup):
            next(it)
        with get_task_stream(pool.client) as ts:
            t = time.perf_counter()
            for _ in it:
                pass
            dt = time.perf_counter() - t
        parts = task_seconds(ts.data)
        dp.close()
    return {"losses": list(dp.loss_history), "samples_s": dp.batch_size * steps / dt, "reduce_s": parts["reduce"] / steps,
            "grad_s": parts["grad"] / steps, "update_s": parts["update"] / steps,
            "transfer_s": parts["transfer"] / steps, "step_s": dt / steps, "info": info}


TASKS = {"grad": ("slice_gradient", "dev_slice_gradient"), "update": ("apply_update", "dev_apply_update"),
         "reduce": ("_reduce_step",)}


def task_seconds(stream: list) -> dict:
    """Worker seconds over a task stream (distributed.get_task_stream's records), by part of the step:
    the slices' gradient tasks (their device readback included), the update tasks, the reduction tree (its
    compute and the transfers into it, as the table has always counted it), and every transfer between
    workers."""
    out = dict.fromkeys(("grad", "update", "reduce", "transfer"), 0.0)
    for task in stream:
        key = str(task.get("key", "")).lstrip("('\"")          # "<function name>-<uuid>" (pure=False)
        spans = task.get("startstops", ())
        comp = sum(s["stop"] - s["start"] for s in spans if s.get("action") == "compute")
        moved = sum(s["stop"] - s["start"] for s in spans if s.get("action") == "transfer")
        out["transfer"] += moved
        for part, names in TASKS.items():
            if key.startswith(tuple(n + "-" for n in names)):
                out[part] += comp + (moved if part == "reduce" else 0.0)
    return out


def demo_spec(width: int, layers: int = 7, features: int = 64, batch: int = 8) -> str:
    hidden = f'{{ op = "linear", out = {width} }}, {{ op = "relu" }}'
    nodes = ", ".join([hidden] * layers + ['{ op = "linear", out = 10 }'])
    return f"""
name = "wide-mlp-{width}"
[data]
dataset = "synthetic_classification"
n_rows = 256
n_features = {features}
n_classes = 10
[model]
nodes = [{nodes}]
[recipe]
optimizer = {{ name = "adamw", lr = 1e-3 }}
batch_size = {batch}
determinism = "prod"
seed = 0
"""


def sized_demo(memory: int, device: str) -> tuple[str, object]:
    """The narrowest wide MLP whose plan is red on one device of `memory` bytes, planned sharded over two.

    An even number of equal square layers (6 per 8 GiB declared) splits the state evenly and keeps each
    weight well under an adapter's buffer limit."""
    from scellis_jupyter.pool.sharding import pool_plan
    layers = 1 + 6 * max(1, -(-memory // (8 << 30)))

    def planned(w):
        return pool_plan(demo_spec(w, layers), "shard", 2, memory=memory, device=device)
    lo, hi = 16, 16
    while planned(hi).single_verdict != "red":   # widen until one device is red
        lo, hi = hi, hi * 2
    for _ in range(24):                           # the narrowest red-on-one width
        if hi - lo <= max(1, hi // 64):
            break
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if planned(mid).single_verdict == "red" else (mid, hi)
    return demo_spec(hi, layers), planned(hi)


def sharded_demo(memory: int, run_memory: int, devices: list, steps: int, processes: bool) -> list[str]:
    import scellis_jupyter as sc
    from scellis_jupyter.pool import Pool
    from scellis_jupyter.pool.devices import resolve
    from scellis_jupyter.pool.sharding import ShardedRun
    lines = []
    lines.append(f"planned at {memory / 2**30:.2f} GiB per device:")
    try:
        _, plan_half = sized_demo(memory, devices[0])
        lines += ["  " + ln for ln in plan_half.table().splitlines()]
    except sc.ScellisError as e:                 # e.g. a tensor over the adapter's buffer limit at that size
        lines.append(f"  not planned: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    spec, plan_run = sized_demo(run_memory, devices[0])
    lines.append(f"run at {run_memory / 2**20:.1f} MiB declared per device ({steps} steps):")
    lines += ["  " + ln for ln in plan_run.table().splitlines()]
    try:
        sc.Run(spec, device=resolve(devices[0]), memory=run_memory, steps=1)
        lines.append("  one device: NOT refused (unexpected)")
    except sc.ScellisError as e:
        lines.append(f"  one device at that memory: refused ({type(e).__name__}: {str(e).splitlines()[0][:90]})")
    single = sc.Run(spec, device=resolve(devices[0]), steps=steps)            # the device really has room: the reference
    single.run_to_end()
    with Pool(workers=2, processes=processes) as pool:
        run = ShardedRun(pool, spec, count=2, memory=run_memory, steps=steps, devices=devices)
        losses = run.train()
        peaks = list(run.measured_peaks)
        run.close()
    gap = max(abs(a - b) / abs(b) for a, b in zip(losses, single.loss_history))
    lines.append(f"  sharded over 2: {run.pool_plan.verdict}, measured peaks "
                 f"{', '.join(f'{p / 2**20:.1f} MiB' for p in peaks)} (declared {run_memory / 2**20:.1f} MiB), "
                 f"loss gap to one device {gap:.2e} (rtol {LOSS_RTOL:g}: {'ok' if gap <= LOSS_RTOL else 'OVER'})")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="a tiny GPT (2 blocks, width 64, seq 32, batch 8)")
    ap.add_argument("--steps", type=int, default=20, help="measured steps")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workers", default="1,2", help="worker counts to measure, comma-separated")
    ap.add_argument("--devices", default="wgpu:0,wgpu:1", help="device per worker (cycled), comma-separated")
    ap.add_argument("--slices", type=int, default=2, help="slices per batch (fixed: the same arithmetic at every count)")
    ap.add_argument("--memory", type=float, default=None, help="declared bytes per device for the sharded plan "
                    "(default: half of the adapter's memory)")
    ap.add_argument("--run-memory", type=float, default=None, help="declared bytes per device for the sharded run "
                    "(default: 64 MiB, or 4 MiB with --small)")
    ap.add_argument("--threads", action="store_true", help="in-process workers (threads) instead of processes")
    ap.add_argument("--no-shard", action="store_true", help="skip the sharded-state demo")
    a = ap.parse_args(argv)
    from scellis_jupyter.pool.devices import adapter_index, resolve
    devices = [d.strip() for d in a.devices.split(",") if d.strip()]
    counts = [int(c) for c in a.workers.split(",")]
    spec = gpt_spec(a.small)
    dev0 = resolve(devices[0])
    n_adapters = len({adapter_index(d) for d in devices[:max(counts)]})
    print(f"adapter: {dev0.name} ({dev0.adapter_type}, {dev0.memory_bytes / 2**30:.1f} GiB {dev0.memory_source}); "
          f"model: {'GPT small' if a.small else 'GPT-style 6x384, seq 256, batch 64'}, tier prod, seed 0; "
          f"{a.warmup} warm-up + {a.steps} measured steps; {a.slices} slices per batch")
    base = single_device(spec, devices[0], a.warmup, a.steps)
    rows = [("1 device, no pool", f"{base['samples_s']:.1f}", "-", "-", "-", "-", "-", "-")]
    for n in counts:
        got = pooled(spec, n, devices, a.slices, a.warmup, a.steps, not a.threads)
        used = sorted({v["adapter_index"] for v in got["info"].values()})
        where = f"{n} worker{'s' if n > 1 else ''}" + (" on one GPU" if n > 1 and len(used) == 1 else
                                                       f" on {len(used)} GPUs" if n > 1 else "")
        if dev0.adapter_type == "cpu-emulated":
            where += f" ({dev0.adapter_type})"
        meas = slice(a.warmup, a.warmup + a.steps)
        gaps = [abs(x - y) / abs(y) for x, y in zip(got["losses"][meas], base["losses"][meas])]
        gap = max(gaps)
        rows.append((where, f"{got['samples_s']:.1f}", f"{got['step_s']:.3f}", f"{got['grad_s']:.4f}",
                     f"{got['reduce_s']:.4f}", f"{got['update_s']:.4f}", f"{got['transfer_s']:.4f}",
                     f"{gap:.2e} ({'ok' if gap <= LOSS_RTOL else 'OVER'})"))
    head = ("run", "samples/s", "s/step", "slice grads s/step", "reduce s/step", "updates s/step", "transfers s/step",
            f"max loss gap (rtol {LOSS_RTOL:g})")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    if n_adapters < min(max(counts), len(devices)):
        print(f"note: {len(devices)} device names landed on {n_adapters} adapter(s): two workers on one GPU")
    if not a.no_shard:
        mem = int(a.memory) if a.memory else int(dev0.memory_bytes) // 2
        run_mem = int(a.run_memory) if a.run_memory else (4 << 20 if a.small else 64 << 20)
        print("sharded optimizer state (red on one device, green over two):")
        for ln in sharded_demo(mem, run_mem, devices, max(2, min(a.steps, 5)), not a.threads):
            print("  " + ln)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
