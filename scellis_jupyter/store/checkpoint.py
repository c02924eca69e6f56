"""Checkpoints: a JSON manifest object naming a weights object, an optimizer-state object and the rest.

Why a manifest of hashes: the weights of two checkpoints that did not change (a frozen base model) are
stored once, a checkpoint is verified by re-hashing what it names, and `parent` links make a run's
history a chain that survives resumes. Everything needed to continue a run exactly is in it: weights,
optimizer slots, RNG positions per sub-stream, epoch/step, metric history, and the spec it came from
(a checkpoint of another spec is refused, with the diff of the two spec texts when the store has them).
"""
from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from .._version import __version__
from .errors import StoreError

if TYPE_CHECKING:
    from .store import Store

FORMAT, VERSION = "scellis-checkpoint", 1
_FIELDS = ("format", "version", "weights", "optimizer_state", "optimizer_slots", "rng_state", "epoch", "step",
           "metrics_history", "spec_hash", "parent", "engine_version", "created", "extra")


@dataclass(frozen=True)
class Checkpoint:
    """A loaded, verified checkpoint. `optimizer_state` is param -> slot -> array, as the optimizer keeps it."""

    hash: str
    weights: dict[str, np.ndarray]
    optimizer_state: dict[str, dict[str, np.ndarray]]
    rng_state: dict[str, Any]
    epoch: int
    step: int
    metrics_history: dict[str, list[list[float]]]
    spec_hash: str
    parent: str | None
    engine_version: str
    created: float
    extra: dict[str, Any] = field(default_factory=dict)
    weights_hash: str = ""
    optimizer_hash: str = ""


def _bad(field_name: str, what: str, where: str = "save_checkpoint") -> StoreError:
    return StoreError(f"{field_name}: {what}", where=f"{where} field {field_name!r}", code="bad-argument")


def _check_rng(rng_state: Any) -> dict[str, Any]:
    if not isinstance(rng_state, Mapping) or set(rng_state) - {"seed", "positions"} or "seed" not in rng_state:
        raise _bad("rng_state", 'must be {"seed": int, "positions": {stream: int}}')
    seed, pos = rng_state["seed"], rng_state.get("positions", {})
    if not _is_int(seed) or not isinstance(pos, Mapping) or not all(
            isinstance(k, str) and _is_int(v) and v >= 0 for k, v in pos.items()):
        raise _bad("rng_state", 'must be {"seed": int, "positions": {stream: int >= 0}}')
    return {"seed": int(seed), "positions": {k: int(pos[k]) for k in sorted(pos)}}


def _check_metrics(history: Any) -> dict[str, list[list[float]]]:
    if not isinstance(history, Mapping):
        raise _bad("metrics_history", "must be a dict name -> list of [step, value]")
    out = {}
    for name, points in history.items():
        if not isinstance(name, str) or not isinstance(points, (list, tuple)):
            raise _bad("metrics_history", f"entry {name!r} must be a list of [step, value]")
        clean = []
        for p in points:
            if not isinstance(p, (list, tuple)) or len(p) != 2 or not _is_int(p[0]) or not _is_num(p[1]):
                raise _bad("metrics_history", f"entry {name!r} has {p!r}, not [step, value]")
            clean.append([int(p[0]), float(p[1])])
        out[name] = clean
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_num(v: Any) -> bool:
    return _is_int(v) or isinstance(v, (float, np.floating))


def _flatten_optimizer(state: Any) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """param -> slot -> array  =>  {"param/slot": array} plus the slot list (params without slots survive)."""
    if not isinstance(state, Mapping):
        raise _bad("optimizer_state", "must be a dict param -> slot -> array")
    flat, slots = {}, {}
    for param, per in state.items():
        if not isinstance(param, str) or not isinstance(per, Mapping):
            raise _bad("optimizer_state", f"entry {param!r} must map slot names to arrays")
        for slot, arr in per.items():
            if not isinstance(slot, str) or not slot or "/" in slot:
                raise _bad("optimizer_state", f"slot name {slot!r} of {param!r} must be a non-empty name without '/'")
            flat[f"{param}/{slot}"] = arr
        slots[param] = sorted(per)
    return flat, slots


def save_checkpoint(store: "Store", *, weights: Mapping[str, np.ndarray],
                    optimizer_state: Mapping[str, Mapping[str, np.ndarray]], rng_state: Mapping[str, Any],
                    epoch: int, step: int, metrics_history: Mapping[str, Any], spec_hash: str,
                    parent: str | None = None, extra: Mapping[str, Any] | None = None,
                    run: str | None = None) -> str:
    """Store a checkpoint (weights and optimizer objects first, the manifest last); returns its hash.

    The manifest is written only after everything it names is durable, so a crash at any point leaves
    either a complete checkpoint or none (plus unreferenced objects that gc removes).
    """
    if not isinstance(weights, Mapping):
        raise _bad("weights", "must be a dict name -> array")
    for name, value in (("epoch", epoch), ("step", step)):
        if not _is_int(value) or value < 0:
            raise _bad(name, f"must be an integer >= 0, got {value!r}")
    if not isinstance(spec_hash, str) or not spec_hash:
        raise _bad("spec_hash", "must be the hash of the run's spec (a non-empty string)")
    if extra is not None and not isinstance(extra, Mapping):
        raise _bad("extra", "must be a dict (JSON values) or None")
    rng = _check_rng(rng_state)
    history = _check_metrics(metrics_history)
    flat, slots = _flatten_optimizer(optimizer_state)
    if parent is not None:
        parent = store.resolve(parent)
    w = store.put_tensors(dict(weights), kind="checkpoint-weights")
    o = store.put_tensors(flat, kind="checkpoint-optimizer")
    created = time.time()
    manifest = {"format": FORMAT, "version": VERSION, "weights": w, "optimizer_state": o,
                "optimizer_slots": slots, "rng_state": rng, "epoch": int(epoch), "step": int(step),
                "metrics_history": history, "spec_hash": spec_hash, "parent": parent,
                "engine_version": __version__, "created": created, "extra": dict(extra or {})}
    if run is not None:             # with step, epoch and parent: what the index needs to be rebuilt from objects
        manifest["run"] = run
    h = store.put_json(manifest, kind="checkpoint")
    store.index.add_checkpoint(h, run=run, step=int(step), epoch=int(epoch), parent=parent,
                               spec_hash=spec_hash, created=created)
    return h


def load_checkpoint(store: "Store", ref: str) -> Checkpoint:
    """Load and verify a checkpoint by hash (or unique prefix), ref/pin name, or run id (its last checkpoint)."""
    h = store.resolve_checkpoint(ref)
    m = store.get_json(h)
    where = f"checkpoint {h[:12]} in store {store.root}"

    def bad(name: str, what: str) -> StoreError:
        return StoreError(f"checkpoint manifest is malformed: field {name!r} {what}", where=f"{where}, field {name!r}",
                          code="checkpoint-malformed", field=name, object=h,
                          hint="this object is not a checkpoint written by scellis, or it was edited")

    if not isinstance(m, dict):
        raise bad("<manifest>", f"must be a JSON object, got {type(m).__name__}")
    for name in _FIELDS:
        if name not in m:
            raise bad(name, "is missing")
    if m["format"] != FORMAT:
        raise bad("format", f"is {m['format']!r}, not {FORMAT!r}")
    if m["version"] != VERSION:
        raise bad("version", f"is {m['version']!r}; this engine reads version {VERSION}")
    for name in ("weights", "optimizer_state", "spec_hash", "engine_version"):
        if not isinstance(m[name], str) or not m[name]:
            raise bad(name, "must be a non-empty string")
    for name in ("epoch", "step"):
        if not _is_int(m[name]) or m[name] < 0:
            raise bad(name, f"must be an integer >= 0, got {m[name]!r}")
    if m["parent"] is not None and not isinstance(m["parent"], str):
        raise bad("parent", "must be a hash or null")
    if not _is_num(m["created"]):
        raise bad("created", "must be a number (seconds since the epoch)")
    if not isinstance(m["extra"], dict):
        raise bad("extra", "must be a JSON object")
    slots = m["optimizer_slots"]
    if not isinstance(slots, dict) or not all(isinstance(v, list) and all(isinstance(s, str) for s in v)
                                              for v in slots.values()):
        raise bad("optimizer_slots", "must map each param to a list of slot names")
    try:
        rng = _check_rng(m["rng_state"])
    except StoreError:
        raise bad("rng_state", 'must be {"seed": int, "positions": {stream: int}}') from None
    try:
        history = _check_metrics(m["metrics_history"])
    except StoreError:
        raise bad("metrics_history", "must map names to lists of [step, value]") from None

    weights = store.get_tensors(m["weights"])
    flat = store.get_tensors(m["optimizer_state"])
    expected = {f"{p}/{s}" for p, ss in slots.items() for s in ss}
    if expected != set(flat):
        raise bad("optimizer_slots", f"does not match the tensors of object {m['optimizer_state'][:12]} "
                  f"(missing {sorted(expected - set(flat))[:3]}, extra {sorted(set(flat) - expected)[:3]})")
    opt = {p: {s: flat[f"{p}/{s}"] for s in ss} for p, ss in slots.items()}
    return Checkpoint(hash=h, weights=weights, optimizer_state=opt, rng_state=rng, epoch=int(m["epoch"]),
                      step=int(m["step"]), metrics_history=history, spec_hash=m["spec_hash"], parent=m["parent"],
                      engine_version=m["engine_version"], created=float(m["created"]), extra=m["extra"],
                      weights_hash=m["weights"], optimizer_hash=m["optimizer_state"])


def check_spec(ckpt: Checkpoint, spec_hash: str,
               spec_text_by_hash: Mapping[str, str] | Callable[[str], str | None] | None = None) -> None:
    """Refuse to resume `ckpt` under a different spec; the error carries the diff of the two spec texts."""
    if ckpt.spec_hash == spec_hash:
        return

    def text(h: str) -> str | None:
        if spec_text_by_hash is None:
            return None
        if callable(spec_text_by_hash):
            return spec_text_by_hash(h)
        return spec_text_by_hash.get(h)

    old, new = text(ckpt.spec_hash), text(spec_hash)
    diff = ""
    if old is not None and new is not None:
        diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                            fromfile=f"checkpoint spec {ckpt.spec_hash[:12]}",
                                            tofile=f"this spec {spec_hash[:12]}"))
    message = (f"checkpoint {ckpt.hash[:12]} was written by spec {ckpt.spec_hash[:12]}, "
               f"not by this spec {spec_hash[:12]}")
    if diff:
        message += ":\n" + diff.rstrip("\n")
    else:
        message += " (the store has not both spec texts, so no diff can be shown)"
    raise StoreError(message, where=f"checkpoint {ckpt.hash[:12]}", code="spec-mismatch", diff=diff,
                     checkpoint_spec=ckpt.spec_hash, spec=spec_hash,
                     hint="resume with the spec the checkpoint came from, or start a new run from its weights")
