"""Catalog-named tables of a spec: a name, or a table with `name` and hyper-parameters, checked against the
registry (built-in and user entries alike), each mistake at its key's line:col."""
from __future__ import annotations

from typing import Any

from ..catalog import registry
from ..errors import CatalogError, did_you_mean
from .schema import KNOWN, MAX_COUNT, OPTIMIZER_KEYS, SCHEDULER_KEYS, Checker, format_path, show


def _catalog_names(kind: str) -> tuple:
    return tuple(e["name"] for e in registry.list_entries(kind))


def _check_params(ck: Checker, entry, t: dict, p: tuple, skip: tuple = ("name",)) -> dict:
    """A {name, **params} table against the entry's declared Params: unknown keys with did-you-mean, values
    typed and in range, each error at its key's line:col. Returns the validated params."""
    out = {}
    for k, v in t.items():
        if k in skip:
            continue
        if k not in entry.params:
            hint = did_you_mean(k, entry.params) or (f"{entry.kind} {entry.name!r} takes: "
                                                     f"{', '.join(entry.params) or 'no parameters'}")
            ck.error(p + (k,), f"{entry.kind} {entry.name!r} has no parameter {k!r}", hint, value=False,
                     kind="unknown-key", key=k)
            continue
        try:
            out[k] = entry.params[k].validate(k, v, f"{entry.kind} {entry.name!r}")
        except CatalogError as e:
            ck.error(p + (k,), f"{entry.kind} {entry.name!r}: {e.diagnostic.message}", e.diagnostic.hint,
                     kind="range", got=v)
    return out


def _check_named(ck: Checker, v: Any, p: tuple, kind: str, what: str) -> tuple[str | None, dict]:
    """A catalog entry given as "name" or { name = "...", params... }: (name, validated params)."""
    if isinstance(v, str):
        name = ck.name_in(v, p, _catalog_names(kind), what)
        return name, {}
    t = ck.table(v, p, f' or a {what} name')
    if t is None:
        return None, {}
    if not ck.required(t, "name", p):
        return None, {}
    name = ck.choice(t, "name", p, _catalog_names(kind), None, what)
    if name is None:
        return None, {}
    return name, _check_params(ck, registry.get(kind, name), t, p)


def _named_table(ck: Checker, t: dict, key: str, path: tuple, default: str, check) -> dict | None:
    """optimizer / scheduler: a name, or a table with `name` and hyperparameters; always a dict out."""
    p = path + (key,)
    if key not in t:
        return check(ck, {"name": default}, p, implicit=True)
    v = t[key]
    if isinstance(v, str):
        if ck.name_in(v, p, _catalog_names(key) if key == "optimizer" else KNOWN[key], key) is None:
            return None
        return check(ck, {"name": v}, p, implicit=True)
    tab = ck.table(v, p, f' or a {key} name like "{default}"')
    if tab is None:
        return None
    return check(ck, tab, p)


def _check_optimizer(ck: Checker, t: dict, p: tuple, implicit: bool = False) -> dict:
    """Built-in or user optimizer (names from the catalog registry); a user entry's own hyperparameters
    are allowed and checked against its Params."""
    entry = None
    if isinstance(t.get("name"), str) and t["name"] in _catalog_names("optimizer"):
        entry = registry.get("optimizer", t["name"])
    own = tuple(k for k in (entry.params if entry is not None else {}) if k not in OPTIMIZER_KEYS)
    ck.known_keys(t, p, OPTIMIZER_KEYS + own, "the optimizer")
    if not implicit:
        if not ck.required(t, "name", p):
            return {}
        if ck.choice(t, "name", p, _catalog_names("optimizer"), None, "optimizer") is None:
            return {}
    if own:
        _check_params(ck, entry, {k: v for k, v in t.items() if k in own}, p)
    out = dict(t)
    # a recipe without lr gets the entry's documented default (Prodigy 1.0, Lion 1e-4, Adafactor 1e-2 ...)
    lr_param = entry.params.get("lr") if entry is not None else None
    default_lr = float(lr_param.default) if lr_param is not None and isinstance(lr_param.default, (int, float)) \
        else 1e-3
    out["lr"] = ck.number(t, "lr", p, 0.0, 100.0, default_lr, lo_open=True)
    ck.number(t, "weight_decay", p, 0.0, 10.0)
    ck.number(t, "beta1", p, 0.0, 1.0, hi_open=True)
    ck.number(t, "beta2", p, 0.0, 1.0, hi_open=True)
    ck.number(t, "momentum", p, 0.0, 1.0)
    ck.number(t, "dampening", p, 0.0, 1.0)
    ck.number(t, "eps", p, 0.0, 1.0, lo_open=True, hi_open=True)
    ck.boolean(t, "nesterov", p)
    ck.boolean(t, "amsgrad", p)
    if "betas" in t:
        b = t["betas"]
        ok = isinstance(b, list) and len(b) == 2 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and 0.0 <= x < 1.0 for x in b)
        if not ok:
            ck.error(p + ("betas",), f"{format_path(p + ('betas',))} must be two numbers in [0, 1), got {show(b)}",
                     kind="range", got=b)
        else:
            out["betas"] = [float(x) for x in b]
    return out


def _check_scheduler(ck: Checker, t: dict, p: tuple, implicit: bool = False) -> dict:
    ck.known_keys(t, p, SCHEDULER_KEYS, "the scheduler")
    if not implicit:
        if not ck.required(t, "name", p):
            return {}
        if ck.choice(t, "name", p, KNOWN["scheduler"], None, "scheduler") is None:
            return {}
    for k in ("warmup_steps", "patience"):
        ck.integer(t, k, p, 0, MAX_COUNT)
    for k in ("total_steps", "step_size", "restart_every"):
        ck.integer(t, k, p, 1, MAX_COUNT)
    ck.integer(t, "cycles", p, 1, 10 ** 6)
    ck.number(t, "min_lr", p, 0.0, 100.0)
    for k in ("max_lr", "base_lr", "power"):
        ck.number(t, k, p, 0.0, 100.0, lo_open=True)
    ck.number(t, "gamma", p, 0.0, 10.0, lo_open=True)
    for k in ("factor", "pct_start"):
        ck.number(t, k, p, 0.0, 1.0, lo_open=True, hi_open=True)
    if "milestones" in t:
        m = t["milestones"]
        ok = isinstance(m, list) and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in m) \
            and m == sorted(set(m))
        if not ok:
            ck.error(p + ("milestones",), f"{format_path(p + ('milestones',))} must be increasing positive step "
                     f"numbers, got {show(m)}", kind="type", got=m)
    return dict(t)
