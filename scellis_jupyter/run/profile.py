"""Measured time per kernel over a few training steps of a spec (or of a recorded run's own spec).

Why measured: the plan says what a step dispatches and how much memory it holds, not where its time goes.
On wgpu every dispatch runs in its own compute pass whose start and end are timestamped on the GPU (the
adapter must grant 'timestamp-query'; without it the profile says so and times nothing per kernel); a pass
is charged from the later of its start and the end of the passes before it, since a start may be stamped
while those still run (backends/profiling.exclusive_seconds). On the reference path each dispatch is
timed on the host clock, op by op (the compiled replay would fold the ops into one call). The timed
step's wall time (inputs, the step Program, the loss read) sits beside the kernels, and so does the same
step untimed, as the loop runs it (`loop_step_ms`: recorded replay, no launcher work): a timed step runs
every dispatch through its launcher, so its host share is the profiler's, not the loop's.

    profile_spec(spec, steps=3)          -> dict (kernels: name, calls, total_ms, share, mean_us)
    profile_run(run_id, store=...)       -> the same for a recorded run's spec
    profile_of(spec | run | run id)      -> whichever of the two fits (what sc.profile's widget calls)
    profile_text(prof, by="kernel"|"shape"|"scope"), profile_html(prof)

Each timed dispatch carries its kernel, op, layer (the spec node it was built in; "<layer>/bwd" for its
gradient, "loss", "clip", "optimizer") and its operands' and result's shapes and dtypes; `by_shape` sums per
(kernel, shape), `by_scope` per layer, and `timeline` is the last timed step's dispatches in order.
"""
from __future__ import annotations

import html
import time

from ..backends.profiling import dispatch_tag
from ..errors import ProfileError, ScellisError
from ..spec import Spec
from .records import open_store
from .run import Run, stored_memory_data


def profile_spec(spec, *, device=None, steps: int = 3, warmup: int = 2, top: int = 12, data: dict | None = None,
                 tier: str | None = None, run_id: str | None = None) -> dict:
    """Train `warmup` steps, then time `steps` more kernel by kernel; returns the profile as a dict."""
    for name, v, lo in (("steps", steps, 1), ("warmup", warmup, 1), ("top", top, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ProfileError(f"{name}={v!r} must be an integer >= {lo}", where="profile",
                               hint="warm-up steps compile the kernels; they are not timed")
    run = Run(Spec.of(spec, data), device=device, steps=warmup + 2 * steps, eval_every=0, tier=tier)
    be = run.impl
    batches = _batches(run)
    for _ in range(warmup):
        run._one_step(*next(batches))
    timed: list[dict] = []
    step_s: list[float] = []
    first_step = 0                                  # dispatches before the last timed step's first
    gpu = run.device.backend != "reference"
    method = "host clock per dispatch (reference path, op by op)"
    if gpu:
        method = "GPU timestamp queries, one compute pass per dispatch, each charged from the end of the one before"
        if not be.start_timing():
            method = "none: the adapter does not grant 'timestamp-query'"
            gpu = None
        else:
            be.stop_timing()
    for _ in range(steps):
        x, y = next(batches)
        if gpu:
            be.start_timing()
            t0 = time.perf_counter()
            run._one_step(x, y)                    # its loss read waits for the GPU
            step_s.append(time.perf_counter() - t0)
            first_step = len(timed)
            timed.extend(be.stop_timing())
        elif gpu is None:
            t0 = time.perf_counter()
            run._one_step(x, y)
            step_s.append(time.perf_counter() - t0)
        else:
            got: list = []
            with _host_timed(be, got):
                t0 = time.perf_counter()
                run._one_step(x, y)
                step_s.append(time.perf_counter() - t0)
            first_step = len(timed)
            timed.extend(got)
    loop_s: list[float] = []              # the same steps untimed, as the loop runs them (recorded replay)
    for _ in range(steps):
        x, y = next(batches)
        t0 = time.perf_counter()
        run._one_step(x, y)
        loop_s.append(time.perf_counter() - t0)
    prof = _summary(run, timed, step_s, steps, top, method, run_id, first_step)
    prof["loop_step_ms"] = 1e3 * min(loop_s)
    return prof


def profile_run(run_id: str, *, store=None, device=None, steps: int = 3, warmup: int = 2, top: int = 12) -> dict:
    """`profile_spec` of a recorded run's own spec (from the store's text), at its tier, on its device unless
    told otherwise."""
    st = open_store(store, create=False)
    rec = st.get_run(run_id)
    text = st.spec_text(rec.spec_hash) if rec.spec_hash else None
    if text is None:
        raise ProfileError(f"run {rec.id} has no spec in the store (spec {str(rec.spec_hash or '-')[:12]})",
                           where=f"run {rec.id}", hint="profile the spec file instead: sc.profile_spec(path)")
    ex = rec.extra or {}
    try:
        spec = Spec.from_text(text, source=ex.get("spec_source") or "<stored spec>", base_dir=ex.get("base_dir"),
                              data=stored_memory_data(st, ex.get("memory_data")))
    except ScellisError as e:
        raise ProfileError(f"run {rec.id}'s spec cannot be rebuilt: {e.diagnostic.message}", where=f"run {rec.id}",
                           hint=e.diagnostic.hint) from e
    dev = device or (rec.device or {}).get("backend") or None
    return profile_spec(spec, device=dev, steps=steps, warmup=warmup, top=top, tier=rec.tier, run_id=rec.id)


def profile_of(target, *, store=None, device=None, steps: int = 3, warmup: int = 2, top: int = 12) -> dict:
    """A profile of whatever a notebook has at hand: a profile dict (returned as is), a Run or Detached (its
    recorded run), a Spec, spec text or a spec file, or a run id (or unique prefix) in the store."""
    import os
    kw = dict(device=device, steps=steps, warmup=warmup, top=top)
    if isinstance(target, dict) and "kernels" in target and "method" in target:
        return target
    rid = getattr(target, "run_id", None)
    if rid is not None and not isinstance(target, (str, Spec)):
        st = store if store is not None else getattr(target, "store", None)
        return profile_run(rid, store=st, **kw)
    if isinstance(target, (Spec, os.PathLike)):
        return profile_spec(target, **kw)
    if isinstance(target, str):
        if "\n" in target or "=" in target or target.endswith(".toml") or os.path.isfile(target):
            return profile_spec(target, **kw)
        return profile_run(target, store=store, **kw)
    raise ProfileError(f"cannot profile a {type(target).__name__}", where="profile",
                       hint="give a spec (Spec, TOML text or file), a run (sc.Run, or its id), or a profile dict")


def _batches(run: Run):
    while True:
        yield from run.loader


class _host_timed:
    """The reference backend dispatching op by op, each dispatch timed on the host clock into `got`."""

    def __init__(self, be, got: list):
        self.be, self.got = be, got

    def __enter__(self):
        be, got, inner = self.be, self.got, type(self.be).dispatch
        self.replay = getattr(be, "replay", None)
        be.replay = False

        def timed(value, ins, out, prog):
            t0 = time.perf_counter()
            inner(be, value, ins, out, prog)
            s = time.perf_counter() - t0
            got.append({"kernel": value.op, **dispatch_tag(value, ins), "s": s})
        be.dispatch = timed                 # the instance's own: the class (and other runs) stay untouched
        return self

    def __exit__(self, *exc) -> None:
        del self.be.dispatch
        if self.replay is not None:
            self.be.replay = self.replay


def shape_text(ins: list, out: list) -> str:
    """`f32[512,1024] f32[1024,512] -> f32[512,512]`: a dispatch's operands and result."""
    def one(sd):
        shape, dtype = sd
        return f"{dtype}[{','.join(str(d) for d in shape)}]"
    return " ".join(one(x) for x in ins) + " -> " + " ".join(one(x) for x in out)


def _group(timed: list, key, make, all_ms: float, steps: int) -> list[dict]:
    by: dict = {}
    for t in timed:
        r = by.get(key(t))
        if r is None:
            r = by[key(t)] = {**make(t), "calls": 0, "total_ms": 0.0, "_ops": set(), "_scopes": set()}
        r["calls"] += 1
        r["total_ms"] += t["s"] * 1e3
        r["_ops"].add(t["op"])
        r["_scopes"].add(t["scope"])
    rows = sorted(by.values(), key=lambda r: -r["total_ms"])
    for r in rows:
        r["ops"], r["scopes"] = sorted(r.pop("_ops")), sorted(r.pop("_scopes"))
        r["share"] = r["total_ms"] / all_ms if all_ms else 0.0
        r["mean_us"] = 1e3 * r["total_ms"] / r["calls"]
        r["calls_per_step"] = r["calls"] / steps
    return rows


def _summary(run: Run, timed: list, step_s: list, steps: int, top: int, method: str, run_id,
             first_step: int = 0) -> dict:
    """The table's rows (by kernel, by kernel and shape, by layer) over every timed step, and the last
    timed step's dispatches in order (the timeline the notebook widget draws)."""
    for t in timed:
        t["shape"] = shape_text(t["ins"], t["out"])
    step_ms = 1e3 * sum(step_s) / max(1, len(step_s))
    all_ms = step_ms * steps
    rows = _group(timed, lambda t: t["kernel"], lambda t: {"name": t["kernel"]}, all_ms, steps)
    shapes = _group(timed, lambda t: (t["kernel"], t["op"], t["shape"]),
                    lambda t: {"name": t["kernel"], "op": t["op"], "shape": t["shape"], "ins": t["ins"],
                               "out": t["out"]}, all_ms, steps)
    scopes = _group(timed, lambda t: t["scope"], lambda t: {"scope": t["scope"]}, all_ms, steps)
    last = timed[first_step:]
    timeline = [{"kernel": t["kernel"], "op": t["op"], "scope": t["scope"], "shape": t["shape"], "ins": t["ins"],
                 "out": t["out"], "us": t["s"] * 1e6} for t in last]
    d = run.device
    return {"spec": run.spec.name, "run": run_id, "device": f"{d.backend}:{d.name}", "method": method,
            "steps": steps, "batch_size": run.batch_size, "step_ms": step_ms,
            "kernel_ms": sum(r["total_ms"] for r in rows) / steps, "dispatches": len(timed) / steps,
            "kernels": rows[:top], "kernels_total": len(rows),
            "by_shape": shapes[:top], "by_shape_total": len(shapes),
            "by_scope": scopes, "last_step_ms": step_s[-1] * 1e3 if step_s else 0.0,
            "timeline": timeline, "timeline_ms": sum(t["us"] for t in timeline) / 1e3}


BY = ("kernel", "shape", "scope")


def profile_text(prof: dict, by: str = "kernel") -> str:
    """The profile as a table of the top kernels by total time over the profiled steps; `by="shape"` splits
    each kernel by its operands' shapes (which matmul is slow), `by="scope"` sums the time per layer."""
    if by not in BY:
        raise ProfileError(f"by={by!r} is not one of {', '.join(BY)}", where="profile", hint="--by kernel|shape|scope")
    head = (f"profile of {prof['spec']}" + (f" (run {prof['run']})" if prof.get("run") else "") +
            f": {prof['steps']} steps of batch {prof['batch_size']} on {prof['device']}, "
            f"{prof['step_ms']:.3f} ms a timed step, {prof['dispatches']:.0f} dispatches a step")
    lines = [head, f"timing: {prof['method']}"]
    if not prof["kernels"]:
        lines.append("no kernel was timed")
        return "\n".join(lines)
    share = prof["kernel_ms"] / prof["step_ms"] if prof["step_ms"] else 0.0
    lines.append(f"kernels: {prof['kernel_ms']:.3f} ms a step ({100 * share:.1f}% of the timed step; the rest is host "
                 "work around the kernels, each launched on its own)")
    if prof.get("loop_step_ms"):
        lines.append(f"untimed, as the training loop runs it (recorded replay), the step takes "
                     f"{prof['loop_step_ms']:.3f} ms")
    tail = f"   (calls and ms: all {prof['steps']} timed steps)"
    nums = lambda r: f"{r['calls']:>8}{r['total_ms']:>11.3f}{100 * r['share']:>10.1f}%{r['mean_us']:>10.1f}"
    cols = f"{'calls':>8}{'total ms':>11}{'% of step':>11}{'mean us':>10}"
    if by == "kernel":
        rows, total = prof["kernels"], prof["kernels_total"]
        lines.append(f"  {'kernel':<24}{cols}{tail}")
        lines += [f"  {r['name']:<24}{nums(r)}" for r in rows]
    elif by == "shape":
        rows, total = prof.get("by_shape") or [], prof.get("by_shape_total", 0)
        lines.append(f"  {'kernel':<24}{cols}   shape (operands -> result), layers{tail}")
        for r in rows:
            where = ", ".join(x or "-" for x in r["scopes"][:3]) + (" ..." if len(r["scopes"]) > 3 else "")
            lines.append(f"  {r['name']:<24}{nums(r)}   {r['shape']}  [{where}]")
    else:
        rows = prof.get("by_scope") or []
        total = len(rows)
        w = max([24] + [len(r["scope"]) + 2 for r in rows])
        lines.append(f"  {'layer':<{w}}{cols}{tail}")
        lines += [f"  {(r['scope'] or '-'):<{w}}{nums(r)}" for r in rows]
    if total > len(rows):
        lines.append(f"  ... {total - len(rows)} more rows")
    return "\n".join(lines)


def profile_html(prof: dict) -> str:
    """A static bar chart of the top kernels' share of the step (no script), with the table's numbers."""
    esc = html.escape
    rows = []
    for r in prof["kernels"]:
        w = max(0.5, min(100.0, 100 * r["share"]))
        rows.append(
            f'<tr><td style="font-family:monospace;padding-right:8px">{esc(r["name"])}</td>'
            f'<td style="width:320px"><div title="{esc(", ".join(r["ops"]))}" style="background:#4c78a8;'
            f'height:12px;width:{w:.1f}%"></div></td>'
            f'<td style="text-align:right;padding-left:8px">{100 * r["share"]:.1f}%</td>'
            f'<td style="text-align:right;padding-left:8px">{r["total_ms"]:.3f} ms</td>'
            f'<td style="text-align:right;padding-left:8px">{r["calls"]} calls</td>'
            f'<td style="text-align:right;padding-left:8px">{r["mean_us"]:.1f} us</td></tr>')
    head = esc(profile_text(prof).split("\n")[0])
    return (f'<div class="scellis-profile"><div><b>{head}</b></div><div>{esc(prof["method"])}</div>'
            f'<table style="border-collapse:collapse">{"".join(rows)}</table></div>')


__all__ = ["profile_spec", "profile_run", "profile_of", "profile_text", "profile_html", "shape_text", "BY"]
