"""Training-step benchmark: forward and full step (forward + backward + update) of the engine's planned
Programs beside the same models in PyTorch; the step / forward ratio is the backward's relative cost.

    python benchmarks/training.py                   # every device scellis finds; torch on CUDA when present
    python benchmarks/training.py --devices wgpu --steps 30 --no-write
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

MLP = """
name = "mlp-wide"
[data]
dataset = "synthetic_classification"
n_rows = 4096
n_features = 256
n_classes = 10
[model]
nodes = [{ op = "linear", out = 1024 }, { op = "relu" }, { op = "linear", out = 1024 }, { op = "relu" },
         { op = "linear", out = 10 }]
[recipe]
optimizer = { name = "adamw", lr = 1e-3 }
batch_size = 256
determinism = "prod"
"""

TRANSFORMER = """
name = "char-transformer-4x256"
[data]
dataset = "pydoc_topics"
seq_len = 128
[model]
nodes = [
  { op = "embedding", vocab = 96, dim = 256 },
  { op = "positional_embedding", max_len = 128 },
  { op = "transformer_block", heads = 8, causal = true },
  { op = "transformer_block", heads = 8, causal = true },
  { op = "transformer_block", heads = 8, causal = true },
  { op = "transformer_block", heads = 8, causal = true },
  { op = "layer_norm" },
  { op = "linear", out = 96 },
]
[recipe]
optimizer = { name = "adamw", lr = 1e-3 }
batch_size = 16
determinism = "prod"
"""

GPT = (Path(__file__).resolve().parent / "specs" / "plan_only" / "gpt_bench.toml").read_text()

GPT_MIXED = GPT.replace('name = "gpt-bench"', 'name = "gpt-bench-mixed"').replace(
    "batch_size = 64\n", 'batch_size = 64\nprecision = "mixed-f16"\n').replace(
    'determinism = "prod"', 'determinism = "fast"')   # fast: the tier whose f16 matmuls use packed f16 math
MODELS = {"mlp": MLP, "transformer": TRANSFORMER, "gpt": GPT, "gpt_mixed": GPT_MIXED}
# torch twins of the token models: (vocab, width, seq, blocks, heads, batch)
LM_SHAPES = {"transformer": (96, 256, 128, 4, 8, 16), "gpt": (96, 384, 256, 6, 6, 64),
             "gpt_mixed": (96, 384, 256, 6, 6, 64)}   # torch stays f32: the target compares mixed f16 with torch f32


def _time(fn, steps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    t = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t) / steps * 1e3


def ours(spec_text: str, dev, steps: int) -> dict:
    """ms per forward and per full training step (each ends in a readback, so it is synchronous)."""
    from scellis_jupyter.executor.executor import execute
    from scellis_jupyter.graph import functional as F
    from scellis_jupyter.program.schedule import compile_program
    from scellis_jupyter.run.run import Run
    run = Run(spec_text, device=dev, steps=10 ** 6)
    x, y = next(iter(run.loader))
    st = run.step_prog

    def step():
        run._one_step(x, y)
    graph, inp = run.spec.graph, run.spec.input
    xp = F.placeholder((st.batch_size,) + tuple(inp["shape"]), inp["dtype"], "x")
    params = {l.name: F.placeholder(l.node.shape, l.node.dtype, l.name) for l in st.leaves if l.role == "parameter"}
    pred = graph.forward(xp, params, training=False)
    prog, leaves = compile_program([F.sum_(pred)], dev.backend, run.tier)
    names = {id(v): k for k, v in params.items()}
    xs = run.impl.from_numpy(np.asarray(x, np.float32) if inp["dtype"] == "f32" else np.asarray(x, np.int32),
                             inp["dtype"])

    def forward():
        (o,) = execute(prog, [xs if ln is xp else run.values[names[id(ln)]] for ln in leaves], run.impl)
        run.impl.to_numpy(o)
    f_ms, s_ms = _time(forward, steps), _time(step, steps)
    n_disp = len(st.program.steps)
    if hasattr(run.impl, "dispatches"):       # what one step really dispatched (batched updates are one each)
        before = run.impl.dispatches
        step()
        n_disp = run.impl.dispatches - before
    return {"forward_ms": f_ms, "step_ms": s_ms, "dispatches": n_disp, "program_steps": len(st.program.steps),
            "batch": st.batch_size}


def loop(spec_text: str, dev, steps: int, placement: str) -> tuple[float, float]:
    """(ms per step of the whole loop, ms of the run's end) for `for step in run` (batch order, data, step,
    loss readback) with the data streamed (each batch read on the host and uploaded) or held on the device
    (gathered by row id). The end (final test evaluation, its program compiled on first use) is timed
    apart: it happens once per run, so spread over a few steps it would swamp the per-step figure."""
    from scellis_jupyter.run.run import Run
    text = spec_text.replace("[data]\n", f'[data]\nplacement = "{placement}"\n', 1)
    run = Run(text, device=dev, steps=steps + 3)
    it = iter(run)
    for _ in range(3):
        next(it)
    t = time.perf_counter()
    for _ in range(steps):
        next(it)
    t1 = time.perf_counter()
    for _ in it:                # nothing left but the end of the run
        pass
    return (t1 - t) / steps * 1e3, (time.perf_counter() - t1) * 1e3


def torch_model(name: str, spec_text: str):
    import torch
    import torch.nn as nn
    import torch.nn.functional as TF
    if name == "mlp":
        return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)), \
            (256, (256,), "f32", 10)

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, L, d = x.shape
            z = self.ln1(x)
            q, k, v = (t(z).view(b, L, self.h, d // self.h).transpose(1, 2) for t in (self.q, self.k, self.v))
            a = TF.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, L, d)
            x = x + self.o(a)
            return x + self.fc2(TF.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    vocab, width, seq, nblocks, heads, batch = LM_SHAPES[name]

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocab, width), nn.Parameter(torch.zeros(seq, width))
            self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(nblocks)])
            self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

        def forward(self, x):
            return self.head(self.ln(self.blocks(self.emb(x) + self.pos)))
    return LM(), (batch, (seq,), "i32", vocab)


def theirs(name: str, spec_text: str, steps: int, device: str, autocast: bool = False) -> dict:
    """PyTorch's forward and step on the same model; `autocast`: under torch.autocast(bfloat16) on CUDA, the
    mixed precision a PyTorch user runs (master weights f32, matmuls in bf16 on the tensor cores)."""
    import contextlib

    import torch
    import torch.nn.functional as TF
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model, (b, shape, dtype, classes) = torch_model(name, spec_text)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if dtype == "i32":
        x = torch.randint(0, classes, (b,) + shape, device=device)
        y = torch.randint(0, classes, (b,) + shape, device=device)
    else:
        x = torch.randn((b,) + shape, device=device)
        y = torch.randint(0, classes, (b,), device=device)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def forward():
        with torch.no_grad(), amp():
            model(x).sum().item()

    def step():
        opt.zero_grad(set_to_none=True)
        with amp():
            out = model(x)
            loss = TF.cross_entropy(out.reshape(-1, classes).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        loss.item()
    f_ms, s_ms = _time(forward, steps), _time(step, steps)
    sync()
    return {"forward_ms": f_ms, "step_ms": s_ms}


def main(argv=None) -> int:
    import scellis_jupyter as sc
    from benchmarks.kernels import write_results
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="wgpu,reference")
    ap.add_argument("--models", default="mlp,transformer")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    try:
        import torch
        tdev = "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        torch, tdev = None, None
    for dname in args.devices.split(","):
        try:
            dev = sc.device(dname)
        except sc.ScellisError as e:
            print(f"skip {dname}: {e.diagnostic.message}", file=sys.stderr)
            continue
        rows = []
        for m in args.models.split(","):
            a = ours(MODELS[m], dev, args.steps)
            a["loop_stream_ms"], a["end_stream_ms"] = loop(MODELS[m], dev, args.steps, "stream")
            a["loop_device_ms"], a["end_device_ms"] = loop(MODELS[m], dev, args.steps, "device")
            t = theirs(m, MODELS[m], args.steps, tdev) if torch is not None else None
            if t is not None and tdev == "cuda" and m.endswith("_mixed"):
                tb = theirs(m, MODELS[m], args.steps, tdev, autocast=True)
                toks = a["batch"] * LM_SHAPES[m][2] if m in LM_SHAPES else a["batch"]
                print(f"{m}: ours {a['step_ms']:.3f} ms/step ({toks / a['step_ms'] * 1e3:,.0f} tokens/s); torch f32 "
                      f"{t['step_ms']:.3f} ms, torch bf16 autocast {tb['step_ms']:.3f} ms "
                      f"({toks / tb['step_ms'] * 1e3:,.0f} tokens/s): ours / bf16 autocast = "
                      f"{tb['step_ms'] / a['step_ms']:.3f}x speed", flush=True)
                t = dict(t, bf16_step_ms=tb["step_ms"])
            rows.append((m, a, t))
            tt = (f"torch[{tdev}] fwd {t['forward_ms']:8.3f} ms step {t['step_ms']:8.3f} ms "
                  f"(x{t['step_ms'] / t['forward_ms']:.2f})") if t else ""
            print(f"{dev.backend:9s} {m:12s} dispatches {a['dispatches']:5d} (program steps {a['program_steps']:5d}) "
                  f"fwd {a['forward_ms']:8.3f} ms step {a['step_ms']:8.3f} ms "
                  f"(x{a['step_ms'] / a['forward_ms']:.2f}) loop stream {a['loop_stream_ms']:8.3f} ms "
                  f"(x{a['loop_stream_ms'] / a['step_ms']:.2f} of the step) device {a['loop_device_ms']:8.3f} ms "
                  f"(x{a['loop_device_ms'] / a['step_ms']:.2f}); run end {a['end_stream_ms']:.1f} / "
                  f"{a['end_device_ms']:.1f} ms  {tt}")
        key = f"training @ {dev.name}"
        lines = [f"<!-- BEGIN {key} -->", f"### training step on {dev.name}", "",
                 f"- date: {_dt.date.today().isoformat()}", f"- device: {dev}",
                 f"- reference: PyTorch {torch.__version__ if torch else '-'} on {tdev} (TF32 off), same shapes, "
                 "AdamW, cross-entropy", "- step = forward + backward + update, ending in a loss readback; "
                 "step / forward is the backward's cost relative to forward; loop = ms per step of `for step in run` "
                 "(batch order, data, step, loss readback) with the data streamed from the host or placed on the "
                 "device ([data] placement); loop / step is that per-step time over the step's; run end = the "
                 "once-per-run end (final test evaluation, first-use compile), timed apart from the steps", "",
                 "| model | batch | kernels per step | forward ms | step ms | step / forward | torch forward ms "
                 "| torch step ms | torch step / forward | our step / torch step | loop ms (stream) | loop ms (device) "
                 "| loop / step (stream) | loop / step (device) | run end ms (stream) |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for m, a, t in rows:
            tcols = (f"{t['forward_ms']:.3f} | {t['step_ms']:.3f} | {t['step_ms'] / t['forward_ms']:.2f} | "
                     f"{a['step_ms'] / t['step_ms']:.1f}") if t else "- | - | - | -"
            lines.append(f"| {m} | {a['batch']} | {a['dispatches']} | {a['forward_ms']:.3f} | {a['step_ms']:.3f} | "
                         f"{a['step_ms'] / a['forward_ms']:.2f} | {tcols} | {a['loop_stream_ms']:.3f} | "
                         f"{a['loop_device_ms']:.3f} | {a['loop_stream_ms'] / a['step_ms']:.2f} | "
                         f"{a['loop_device_ms'] / a['step_ms']:.2f} | {a['end_stream_ms']:.1f} |")
        lines += ["", f"<!-- END {key} -->"]
        if not args.no_write:
            write_results([(key, "\n".join(lines))])
    return 0


if __name__ == "__main__":
    sys.exit(main())
