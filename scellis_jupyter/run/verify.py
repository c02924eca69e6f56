"""`verify`: re-execute a recorded run from its pinned inputs on the reference path and compare.

Why from the store alone: a notebook carries run-record hashes, and "reproducible" means anyone with the
store and the data can rerun the record and get the same result. The pinned inputs are the stored spec
text (its hash is the record's spec hash), the dataset and split hashes (the data on disk is re-hashed,
and a changed file is named), the seed and tier (in the spec and record), the program hash and the
checkpoints (every one re-hashed on load; a resumed run restarts from the checkpoint it resumed from).

Comparison: a `debug` run recorded on the reference device must give the very same weights hash, loss
curve and metrics. A `prod` or `fast` run, or one recorded on another backend (wgpu), is compared
within the tier's declared tolerance per step (`determinism.TOLERANCE`; across devices at least prod's),
allowed to grow with the steps taken (`determinism.trajectory_tolerance`: step t's loss within t times it,
the final weights and metrics within N times it after N steps), as a relative error: ||a - b|| / ||b||
over all weights, and |a - b| / max(|b|, 1) per loss or metric value.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import ScellisError, VerifyError
from .pins import MAX_HASHED_FILES, _changed_files, data_files, file_hashes  # noqa: F401 - also imported from here
from ..program.training import StepOptions
from .. import determinism
from ..backends.device import device as pick
from ..spec import Spec
from .records import open_store
from .run import Run
from .run import stored_memory_data
from .gan import GANRun


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Verification:
    run: str
    ok: bool
    mode: str                      # "exact" or "tolerance"
    tolerance: float               # relative error allowed per step (step t's loss: t times it)
    device: str
    checks: list = field(default_factory=list)
    rerun: dict | None = None      # the re-executed run's weights hash, steps, metrics
    steps: int | None = None       # steps re-executed: the final weights and metrics get steps x tolerance

    @property
    def final_tolerance(self) -> float | None:
        """The relative error allowed on the final weights and metrics (None before the re-run)."""
        return None if self.steps is None else self.tolerance * max(1, self.steps)

    def rule(self) -> str:
        """In words, the comparison the checks apply."""
        if self.mode == "exact":
            return "bit-identical"
        t = f"{self.tolerance:g}"
        if self.steps is None:
            return f"relative error {t} per step, times the steps taken"
        return (f"relative error: step t's loss within t x {t}, final weights and metrics within "
                f"{self.final_tolerance:.3g} after {self.steps} steps")

    @property
    def differences(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict:
        d = asdict(self)
        d["differences"] = [asdict(c) for c in self.differences]
        d.update(final_tolerance=self.final_tolerance, rule=self.rule())
        return d

    def lines(self) -> list[str]:
        head = (f"{'verified' if self.ok else 'DOES NOT VERIFY'}: run {self.run} re-executed on {self.device} "
                f"({self.rule()})")
        return [head] + [f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in self.checks]


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _value_err(a: float, b: float) -> float:
    return abs(float(a) - float(b)) / max(abs(float(b)), 1.0)


def _options(d: dict | None):
    if not d:
        return None
    return StepOptions.from_description(d)


def check_tolerance(tolerance: float) -> float:
    """`tolerance` as a float, refused unless finite and >= 0: an infinite one would pass anything."""
    try:
        tol = float(tolerance)
    except (TypeError, ValueError):
        tol = float("nan")
    if not (math.isfinite(tol) and tol >= 0):
        raise VerifyError(f"tolerance must be a finite relative error >= 0, got {tolerance!r}", where="verify",
                          hint="pass a relative error such as 1e-5, or none for the rule of the run's tier")
    return tol


def verify(run_id: str, store=None, device: str = "reference", tolerance: float | None = None) -> Verification:
    """Re-execute run `run_id` of `store` on `device` (the reference path) and compare with its record.

    tolerance: compare within this relative error instead of the tier's rule (0 still means bit for bit
    only for a debug run recorded on the same backend; otherwise values are compared within 0).

    Raises VerifyError for a run that cannot be verified (not finished, started from weights given in
    Python); returns a Verification (`.ok`, `.checks`, `.differences`) otherwise.
    """
    st = open_store(store, create=False)
    rec = st.get_run(run_id)
    where = f"run {rec.id}"
    if rec.state != "finished":
        hint = f"resume it first: scellis resume {rec.id}" if rec.state == "interrupted" else "verify a finished run"
        raise VerifyError(f"run {rec.id} is {rec.state}: only a finished run has results to verify", where=where,
                          hint=hint)
    ex = rec.extra or {}
    if ex.get("pretrained"):
        raise VerifyError(f"run {rec.id} started from weights passed in Python, which the store does not hold",
                          where=where, hint="start runs to verify from the spec's initializers or a checkpoint")
    if "steps" not in ex or "weights_hash" not in ex:
        raise VerifyError(f"run {rec.id}'s record has no result to compare (steps, weights hash)", where=where,
                          hint="it was recorded by an older engine")
    dev = pick(device)
    recorded = rec.device or {}
    # one backend through one WebGPU implementation (an older record names none: wgpu-native, the only one then)
    was = (recorded.get("implementation") or {}).get("name") or ("wgpu-native" if recorded.get("backend") == "wgpu" else "")
    same_backend = recorded.get("backend") == dev.backend and was == dev.implementation
    exact = same_backend and rec.tier == "debug"
    tol = determinism.trajectory_tolerance(rec.tier, 1, cross_device=not same_backend)    # per step
    if tolerance is not None:
        tol = check_tolerance(tolerance)
        exact = exact and tol == 0.0
    out = Verification(rec.id, False, "exact" if exact else "tolerance", 0.0 if exact else tol,
                       f"{dev.backend}:{dev.name}")
    add = lambda name, ok, detail: out.checks.append(Check(name, bool(ok), detail))  # noqa: E731

    # the spec, by its hash
    text = st.spec_text(rec.spec_hash)
    if text is None:
        add("spec", False, f"the store has no text for spec {str(rec.spec_hash)[:12]}")
        return out
    try:
        mem = stored_memory_data(st, ex.get("memory_data"))     # arrays from the notebook, kept in the store
        spec = Spec.from_text(text, source=ex.get("spec_source") or "<stored spec>",
                              base_dir=ex.get("base_dir"), data=mem)
    except ScellisError as e:                       # e.g. its dataset file is gone: named with file:line:col
        add("spec", False, e.diagnostic.format().replace("\n", " "))
        _data_check(out, ex, add)
        return out
    add("spec", spec.hash == rec.spec_hash, f"hash {spec.hash[:12]}" + (
        "" if spec.hash == rec.spec_hash else f", recorded {str(rec.spec_hash)[:12]}"))

    # every recorded checkpoint re-hashes; the one the run resumed from is its starting point. gc may
    # collect intermediate checkpoints, never a run's final one: that one missing is a failure
    bad, gone, lost = [], [], []
    for c in rec.checkpoints:
        try:
            st.load_checkpoint(c["hash"])
        except ScellisError as e:
            missing = e.diagnostic.code in ("store-unknown", "store-missing")
            if missing and c["hash"] == rec.last_checkpoint:
                lost.append(f"final checkpoint {c['hash'][:12]} (step {c['step']}): {e.diagnostic.message}")
            else:
                (gone if missing else bad).append(f"{c['hash'][:12]} (step {c['step']}): {e.diagnostic.message}")
    note = f"{len(rec.checkpoints) - len(bad) - len(gone) - len(lost)} of {len(rec.checkpoints)} re-hashed"
    if gone:
        note += f"; {len(gone)} collected by gc"
    if lost:
        note += "; missing (gc never collects a run's final checkpoint): " + "; ".join(lost)
    add("checkpoints", not bad and not lost, note + ("; corrupt: " + "; ".join(bad) if bad else ""))
    start = None
    if ex.get("resumed_from"):
        try:
            start = st.load_checkpoint(ex["resumed_from"])
        except ScellisError as e:
            add("start checkpoint", False, f"{ex['resumed_from'][:12]}: {e.diagnostic.message}")
            return out

    # pretrained weights the spec loads ([model.pretrained]) against their recorded BLAKE3
    if ex.get("pretrained_files"):
        changed = _changed_files(ex["pretrained_files"])
        add("pretrained weights", not changed, "; ".join(changed) if changed else
            f"{len(ex['pretrained_files'])} file(s), BLAKE3 {ex['pretrained_files'][0]['blake3'][:12]}")
        if changed:
            return out

    # the data on disk against the recorded hashes (nothing is re-executed on other data)
    try:
        if spec.kind == "gan":
            run = GANRun(spec, device=dev, tier=rec.tier, steps=int(ex["steps"]), epochs=ex.get("epochs"),
                         resume=start)
        else:
            run = Run(spec, device=dev, tier=rec.tier, steps=int(ex["steps"]), epochs=ex.get("epochs"),
                      eval_every=ex.get("eval_every"), options=_options(ex.get("options")), resume=start)
    except ScellisError as e:
        changed = _changed_files(ex.get("data_files") or [])
        add("dataset", False, "; ".join(changed + [e.diagnostic.format().replace("\n", " ")]))
        return out
    dh, sh = run.dataset.content_hash(), run.split.hash
    if dh != rec.dataset_hash:
        changed = _changed_files(ex.get("data_files") or [])
        add("dataset", False, "the data differs from the record: " + ("; ".join(changed) if changed else
            f"dataset {spec.data.get('dataset')!r} hashes to {dh[:12]}, recorded {str(rec.dataset_hash)[:12]}"))
        return out
    add("dataset", True, f"hash {dh[:12]}" + (f" ({len(ex.get('data_files') or [])} files)" if ex.get("data_files")
                                               else ""))
    add("split", sh == rec.split_hash, f"hash {sh[:12]}" + ("" if sh == rec.split_hash else
                                                           f", recorded {str(rec.split_hash)[:12]}"))
    if sh != rec.split_hash:
        return out
    if same_backend:
        ph = run.plan.program_hash
        add("program", ph == rec.program_hash, f"hash {ph[:12]}" + (
            "" if ph == rec.program_hash else f", recorded {str(rec.program_hash)[:12]} (the engine compiles the "
                                              "step differently now)"))

    # re-execute and compare
    for _ in run:
        pass
    r = run.result()
    out.rerun = {"weights_hash": r["weights_hash"], "steps": r["steps"], "metrics": r["metrics"],
                 "measured_peak_bytes": r["measured_peak_bytes"]}
    out.steps = int(r["steps"])
    add("steps", r["steps"] == ex["steps"], f"{r['steps']}" + ("" if r["steps"] == ex["steps"] else
                                                             f", recorded {ex['steps']}"))
    want_loss = list(ex.get("loss_history") or [])
    if exact:
        add("weights", r["weights_hash"] == ex["weights_hash"],
            f"hash {r['weights_hash'][:12]}" + ("" if r["weights_hash"] == ex["weights_hash"] else
                                                f", recorded {ex['weights_hash'][:12]}"))
        diff = [i for i, (a, b) in enumerate(zip(r["loss_history"], want_loss)) if a != b]
        ok = len(r["loss_history"]) == len(want_loss) and not diff
        add("loss history", ok, f"{len(want_loss)} steps identical" if ok else
            f"first difference at step {diff[0] + 1 if diff else min(len(want_loss), len(r['loss_history'])) + 1}")
        bad_m = [k for k, v in (rec.metrics or {}).items() if r["metrics"].get(k) != v]
        add("metrics", not bad_m, "identical" if not bad_m else
            "; ".join(f"{k} {r['metrics'].get(k)} vs recorded {rec.metrics[k]}" for k in bad_m))
        if rec.measured_peak_bytes is not None:
            add("measured peak", r["measured_peak_bytes"] == rec.measured_peak_bytes,
                f"{r['measured_peak_bytes']} bytes (recorded {rec.measured_peak_bytes})")
    else:
        tol_end = out.final_tolerance                  # after the last step (trajectory_tolerance)
        final = rec.last_checkpoint
        try:
            want_w = st.load_checkpoint(final).weights
        except ScellisError as e:
            add("weights", False, f"final checkpoint {str(final)[:12]}: {e.diagnostic.message}")
            want_w = None
        if want_w is not None:
            got_w = run.weights()
            names = sorted(want_w)
            if sorted(got_w) != names:
                add("weights", False, f"parameter names differ: {sorted(set(got_w) ^ set(names))[:3]}")
            else:
                err = _rel(np.concatenate([got_w[k].ravel() for k in names]),
                           np.concatenate([np.asarray(want_w[k]).ravel() for k in names]))
                add("weights", err <= tol_end, f"relative error {err:.3g} (tolerance {tol_end:.3g} after "
                                               f"{r['steps']} steps)")
        n = min(len(want_loss), len(r["loss_history"]))
        # step t's loss within t times the per-step tolerance (determinism.trajectory_tolerance)
        ratio = max(((_value_err(a, b), t) for t, (a, b) in enumerate(zip(r["loss_history"], want_loss), 1)),
                    key=lambda et: et[0] / (tol * et[1]) if tol else et[0], default=(0.0, 1))
        worst_ok = ratio[0] <= tol * ratio[1]
        add("loss history", len(want_loss) == len(r["loss_history"]) and worst_ok,
            f"{n} steps, largest relative error {ratio[0]:.3g} at step {ratio[1]} (allowed {tol * ratio[1]:.3g})")
        errs = {k: _value_err(r["metrics"][k], v) for k, v in (rec.metrics or {}).items()
                if isinstance(v, (int, float)) and isinstance(r["metrics"].get(k), (int, float))}
        worst = max(errs.items(), key=lambda kv: kv[1], default=(None, 0.0))
        add("metrics", all(e <= tol_end for e in errs.values()), f"{len(errs)} compared, largest relative error "
            f"{worst[1]:.3g}" + (f" ({worst[0]})" if worst[0] else ""))
    out.ok = all(c.ok for c in out.checks)
    return out


def _data_check(out: Verification, ex: dict, add) -> None:
    """When the spec no longer loads, still say which recorded data files changed or vanished."""
    changed = _changed_files(ex.get("data_files") or [])
    if changed:
        add("dataset", False, "; ".join(changed))
