"""One registry for every catalog entry, built-in or user-written, and the conformance checks they pass.

Why one path: DESIGN.md promises that built-ins (`catalog/<kind-plural>/*.py`) and user entries (a folder,
a notebook cell) are loaded the same way and are indistinguishable; `entry.origin` only records the file.
Hyperparameters are declared as `Param`s so `make` can refuse a typo or an out-of-range value before a
run starts, and `list` can show them. Optimizer entries declare their state (`StateDecl`) so the planner
counts its bytes.
"""
from __future__ import annotations

import builtins
import contextvars
import hashlib
import importlib.util
import inspect
import linecache
import math
import re
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import dtypes as dt
from ..errors import CatalogError, ScellisError, did_you_mean

KINDS = ("optimizer", "loss", "scheduler", "peft", "metric", "initializer", "regularizer", "aggregation",
         "partitioner", "reducer")
# the folder each kind's entries live in, under catalog/ (and under a user folder)
FOLDERS = {"optimizer": "optimizers", "loss": "losses", "scheduler": "schedulers", "peft": "peft",
           "metric": "metrics", "initializer": "initializers", "regularizer": "regularizers",
           "aggregation": "aggregations", "partitioner": "partitioners", "reducer": "reducers"}
MODULE_ROOT = "scellis_catalog"


# ---- declarations ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """A declared hyperparameter: its type, default and allowed range (checked by `make`).

    `type` is float, int, bool, str or tuple (a fixed-length tuple of floats, each checked against the
    range). A default of None (or optional=True) lets None through, meaning "derive it" (documented by
    the entry). Ranges mean what they say: an unbounded end is open (`[0, inf)`), so inf and -inf are
    refused unless the entry declares `inf_ok=True` (shown as `[1, inf]`); NaN is always refused.
    """

    type: Any
    default: Any = None
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple | None = None
    optional: bool = False
    length: int | None = None
    doc: str = ""
    inf_ok: bool = False           # an unbounded end accepts the infinity itself (e.g. "no limit")

    @property
    def type_name(self) -> str:
        if self.type is tuple:
            return f"tuple[{self.length}]" if self.length else "tuple"
        return getattr(self.type, "__name__", str(self.type))

    def range(self) -> str:
        """Human-readable allowed values, e.g. '(0, inf)', '[0, 1)', "one of 'a', 'b'" or ''."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.lo is None and self.hi is None:
            return ""
        lo = ("[-inf" if self.inf_ok else "(-inf") if self.lo is None else ("(" if self.lo_open else "[") + _num(self.lo)
        hi = ("inf]" if self.inf_ok else "inf)") if self.hi is None else _num(self.hi) + (")" if self.hi_open else "]")
        r = f"{lo}, {hi}"
        return f"each in {r}" if self.type is tuple else r

    def _in_range(self, x: float) -> bool:
        if math.isnan(x) or (math.isinf(x) and not self.inf_ok):
            return False
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        if self.hi is not None and (x >= self.hi if self.hi_open else x > self.hi):
            return False
        return True

    def validate(self, key: str, value: Any, where: str = "") -> Any:
        """The value coerced to the declared type, or a CatalogError naming key, value and range."""
        if value is None:
            if self.optional or self.default is None:
                return None
            raise CatalogError(f"{key}=None is not allowed", where=where,
                               hint=f"give a {self.type_name}, default {self.default!r}")
        bad_type = CatalogError(f"{key}={value!r} is not a {self.type_name}", where=where,
                                hint=f"default is {self.default!r}")
        if self.type is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise bad_type
            return bool(value)
        if self.type is int:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise bad_type
            value = int(value)
            items = [value]
        elif self.type is float:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise bad_type
            value = float(value)
            items = [value]
        elif self.type is tuple:
            if not isinstance(value, (tuple, builtins.list)) or any(
                    isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating))
                    for v in value):
                raise bad_type
            if self.length is not None and len(value) != self.length:
                raise CatalogError(f"{key}={tuple(value)!r} needs {self.length} values, got {len(value)}",
                                   where=where, hint=f"default is {self.default!r}")
            value = tuple(float(v) for v in value)
            items = builtins.list(value)
        else:
            if not isinstance(value, self.type):
                raise bad_type
            items = []
        if self.choices is not None and value not in self.choices:
            hint = did_you_mean(value, [str(c) for c in self.choices]) if isinstance(value, str) else ""
            raise CatalogError(f"{key}={value!r} is not {self.range()}", where=where,
                               hint=hint or f"use {self.range()}")
        for x in items:
            if not math.isfinite(float(x)) and not self._in_range(float(x)):
                raise CatalogError(f"{key}={_num(float(x))} is out of range {self.range()}: not a finite number",
                                   where=where, hint=f"give a finite {key} in {self.range().removeprefix('each in ')}"
                                                     f" (default {self.default!r})")
            if not self._in_range(float(x)):
                raise CatalogError(f"{key}={value!r} is out of range {self.range()}", where=where,
                                   hint=f"{key} must be in {self.range().removeprefix('each in ')}"
                                        f" (default {self.default!r})")
        return value

    def describe(self) -> dict:
        return {"type": self.type_name, "default": self.default, "range": self.range(), "doc": self.doc}


def _num(x: float) -> str:
    return "inf" if x == math.inf else "-inf" if x == -math.inf else "nan" if x != x else f"{x:g}"


@dataclass(frozen=True)
class StateDecl:
    """One optimizer state tensor per parameter: what the planner counts (bytes follow the dtype)."""

    name: str
    shape: tuple
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", dt.canon(self.dtype))

    @property
    def nbytes(self) -> int:
        return dt.nbytes(self.shape, self.dtype)


@dataclass
class Entry:
    """A registered component; `obj` is the class (or factory) that `make` instantiates."""

    kind: str
    name: str
    obj: Any
    summary: str
    params: dict = field(default_factory=dict)
    origin: str = ""          # the file (or "<cell:name>", or a module name) it was registered from

    @property
    def where(self) -> str:
        return f"catalog {self.kind} {self.name!r}"

    def make(self, **hyper) -> Any:
        return make_entry(self, **hyper)

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "summary": self.summary, "origin": self.origin,
                "params": {k: p.describe() for k, p in self.params.items()}}


# ---- the registry ------------------------------------------------------------------------------------
_REG: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_LOCK = threading.RLock()
# set while a file or cell is being loaded: (origin, check) for the register() calls it makes
_LOADING: contextvars.ContextVar = contextvars.ContextVar("scellis_catalog_loading", default=None)
_builtin_loaded = False


def _kind(kind: str) -> str:
    if kind not in _REG:
        raise CatalogError(f"unknown catalog kind {kind!r}", hint=did_you_mean(kind, KINDS)
                           or f"kinds are: {', '.join(KINDS)}")
    return kind


def _origin_of(obj: Any) -> str:
    """Where a directly-registered object came from: its file, or its module name (notebooks: __main__)."""
    mod = sys.modules.get(getattr(obj, "__module__", "") or "")
    if mod is None or mod.__name__ == "__main__":
        return getattr(obj, "__module__", None) or "__main__"
    f = getattr(mod, "__file__", None)
    return str(Path(f).resolve()) if f else mod.__name__


def register(kind: str, name: str, obj: Any, summary: str = "", params: dict | None = None, *,
             check: bool | None = None, origin: str | None = None) -> Entry:
    """Add an entry. A name already taken by a different file is refused; the same file may re-register.

    check=True runs `check_entry` first and refuses a failing entry (the CatalogError names the checks).
    Inside `load_folder` / `load_source` the loader's origin and check setting apply.
    """
    _kind(kind)
    _ensure_builtin()        # so a user entry cannot silently shadow a built-in that loads later
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-.]*", name):
        raise CatalogError(f"{kind} name {name!r} is not a valid name",
                           hint="use letters, digits, '_', '-' or '.', starting with a letter")
    loading = _LOADING.get()
    if origin is None:
        origin = loading["origin"] if loading else _origin_of(obj)
    if check is None:
        check = bool(loading and loading["check"])
    params = dict(params or {})
    for k, p in params.items():
        if not isinstance(p, Param):
            raise CatalogError(f"hyperparameter {k!r} of {kind} {name!r} is declared as {p!r}, not a Param",
                               hint="declare it as Param(type, default, lo=..., hi=...)")
    if not summary:
        doc = inspect.getdoc(obj) or ""
        summary = doc.strip().splitlines()[0] if doc.strip() else ""
    entry = Entry(kind, name, obj, summary, params, origin)
    with _LOCK:
        old = _REG[kind].get(name)
        if old is not None and old.origin != origin:
            raise CatalogError(f"{kind} {name!r} is already registered from {old.origin}",
                               where=f"registering from {origin}",
                               hint="pick another name, or catalog.unregister(kind, name) first")
    if check:
        failed = check_entry(entry)
        if failed:
            raise CatalogError(f"{kind} {name!r} fails conformance: " + "; ".join(failed),
                               where=entry.where, hint="fix the checks named above (see catalog.check_entry)",
                               failed=failed)
    with _LOCK:
        _REG[kind][name] = entry
        if loading is not None:
            loading["registered"].add((kind, name))
    return entry


def unregister(kind: str, name: str) -> None:
    with _LOCK:
        _REG[_kind(kind)].pop(name, None)


def _decorator(kind: str) -> Callable:
    def deco_factory(name: str, summary: str = "", params: dict | None = None, *, check: bool | None = None):
        def deco(obj):
            register(kind, name, obj, summary, params, check=check)
            return obj
        return deco
    deco_factory.__name__ = kind
    deco_factory.__doc__ = (f"Class decorator registering a {kind}: @{kind}(name, summary=..., params={{...}}).")
    return deco_factory


optimizer = _decorator("optimizer")
loss = _decorator("loss")
scheduler = _decorator("scheduler")
peft = _decorator("peft")
metric = _decorator("metric")
initializer = _decorator("initializer")
regularizer = _decorator("regularizer")
aggregation = _decorator("aggregation")
partitioner = _decorator("partitioner")
reducer = _decorator("reducer")


def get(kind: str, name: str) -> Entry:
    """The entry, or a CatalogError with a did-you-mean hint."""
    _ensure_builtin()
    with _LOCK:
        reg = _REG[_kind(kind)]
        if name in reg:
            return reg[name]
        names = builtins.list(reg)
    hint = did_you_mean(name, names) if isinstance(name, str) else ""
    raise CatalogError(f"no {kind} named {name!r}", where="catalog",
                       hint=hint or (f"{kind}s are: {', '.join(sorted(names))}" if names else
                                     f"no {kind} is registered yet"))


def list_entries(kind: str | None = None) -> builtins.list:
    """Every entry (of one kind) as a dict: name, kind, summary, origin, params {name: {type, default, range}}."""
    _ensure_builtin()
    kinds = KINDS if kind is None else (_kind(kind),)
    with _LOCK:
        return [_REG[k][n].describe() for k in kinds for n in sorted(_REG[k])]


def make_entry(entry: Entry, **hyper) -> Any:
    """Validate hyperparameters against the entry's Params, then instantiate it."""
    clean = {}
    for key, value in hyper.items():
        if key not in entry.params:
            hint = did_you_mean(key, entry.params)
            known = ", ".join(entry.params) or "none"
            raise CatalogError(f"{entry.kind} {entry.name!r} has no hyperparameter {key!r}", where=entry.where,
                               hint=hint or f"its hyperparameters are: {known}")
        clean[key] = entry.params[key].validate(key, value, entry.where)
    try:
        return entry.obj(**clean)
    except ScellisError:
        raise
    except (TypeError, ValueError) as e:
        raise CatalogError(f"{entry.kind} {entry.name!r} refused hyperparameters {clean}: {e}",
                           where=entry.where) from e


def make(kind: str, name: str, **hyper) -> Any:
    """An instance of a registered entry, hyperparameters checked (unknown key, wrong type, out of range)."""
    return make_entry(get(kind, name), **hyper)


# ---- loading -----------------------------------------------------------------------------------------
def builtin_folder() -> Path | None:
    """The built-in entries: `scellis_jupyter/catalog_entries` in a wheel, else `<repo>/catalog`."""
    pkg = Path(__file__).resolve().parent.parent
    for cand in (pkg / "catalog_entries", pkg.parent / "catalog"):
        if cand.is_dir():
            return cand
    return None


def _stub(name: str) -> None:
    """Namespace parents so `scellis_catalog.optimizers.adamw` is importable by name (pickle, dataclasses)."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        pname = ".".join(parts[:i])
        if pname not in sys.modules:
            m = types.ModuleType(pname)
            m.__path__ = []
            sys.modules[pname] = m


def _module_name(base: str, origin: str) -> str:
    """`base`, unless another file already owns that module name (then a path-hash suffix)."""
    have = sys.modules.get(base)
    if have is None or getattr(have, "__scellis_origin__", None) == origin:
        return base
    return f"{base}_{hashlib.blake2s(origin.encode(), digest_size=4).hexdigest()}"


def _run_loader(origin: str, modname: str, check: bool, body: Callable[[types.ModuleType], None],
                new_module: Callable[[str], types.ModuleType]) -> builtins.list[Entry]:
    """Execute one file/cell with its origin set; on failure restore what that origin had registered."""
    with _LOCK:
        before = {(k, n): e for k in KINDS for n, e in _REG[k].items() if e.origin == origin}
        state = {"origin": origin, "check": check, "registered": set()}
        token = _LOADING.set(state)
        mod = new_module(modname)
        mod.__scellis_origin__ = origin
        _stub(modname)
        prev_mod = sys.modules.get(modname)
        sys.modules[modname] = mod
        try:
            body(mod)
        except BaseException as e:
            for (k, n) in state["registered"]:
                _REG[k].pop(n, None)
            for (k, n), ent in before.items():
                _REG[k][n] = ent
            if prev_mod is not None:
                sys.modules[modname] = prev_mod
            else:
                sys.modules.pop(modname, None)
            if isinstance(e, (CatalogError, KeyboardInterrupt)):
                raise
            # anything else user code raises, SystemExit included, is the usual diagnostic at its line: a
            # sys.exit() in a cell must not end the kernel's magic or a script that loads a catalog folder
            line = _failing_line(e, origin)
            raise CatalogError(f"loading {origin} failed: {type(e).__name__}: {e}",
                               where=f"{origin}:{line}" if line else origin,
                               hint="a catalog file or cell defines and registers entries; it must not exit"
                               if isinstance(e, SystemExit) else "") from e
        finally:
            _LOADING.reset(token)
        for key in before:                      # entries this file no longer defines are gone
            if key not in state["registered"]:
                _REG[key[0]].pop(key[1], None)
        return [_REG[k][n] for (k, n) in sorted(state["registered"])]


def _failing_line(e: BaseException, origin: str) -> int | None:
    """The line of `origin` (a file or cell) where `e` was raised: its innermost frame there, or a
    SyntaxError's own line."""
    if isinstance(e, SyntaxError) and e.filename == origin:
        return e.lineno
    line, tb = None, e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == origin:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def load_file(path: str | Path, module: str | None = None, *, check: bool = False) -> builtins.list[Entry]:
    """Import one entry file by path (idempotent: re-loading the same file replaces its entries)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise CatalogError(f"no such catalog file: {path}")
    origin = str(path)
    modname = _module_name(module or f"{MODULE_ROOT}.user.{_ident(path.stem)}", origin)
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise CatalogError(f"cannot import {path}", hint="catalog entries are .py files")
    return _run_loader(origin, modname, check, lambda m: spec.loader.exec_module(m),
                       lambda n: importlib.util.module_from_spec(spec))


def _ident(s: str) -> str:
    s = re.sub(r"\W", "_", s)
    return s if s and not s[0].isdigit() else f"_{s}"


def load_folder(path: str | Path, *, check: bool = False, _prefix: str = "") -> builtins.list[Entry]:
    """Load user entries from a folder laid out like catalog/ (`optimizers/*.py`, ...) or flat `*.py`.

    The same code path as the built-ins; entries whose names clash with existing ones from other files
    are refused. check=True runs the conformance checks on each entry as it registers.
    """
    root = Path(path).resolve()
    if not root.is_dir():
        raise CatalogError(f"no such catalog folder: {root}")
    out: builtins.list[Entry] = []
    files = [(f"{MODULE_ROOT}.{_prefix}user", f) for f in sorted(root.glob("*.py")) if not f.name.startswith("_")]
    for kind in KINDS:
        sub = root / FOLDERS[kind]
        if sub.is_dir():
            files += [(f"{MODULE_ROOT}.{_prefix}{FOLDERS[kind]}", f) for f in sorted(sub.glob("*.py"))
                      if not f.name.startswith("_")]
    for base, f in files:
        out += load_file(f, f"{base}.{_ident(f.stem)}", check=check)
    return out


def load_builtin(*, force: bool = False) -> builtins.list[Entry]:
    """Import every `catalog/<kind-plural>/*.py` shipped with the package (once, unless force)."""
    global _builtin_loaded
    with _LOCK:
        if _builtin_loaded and not force:
            folder = builtin_folder()
            return [] if folder is None else [e for k in KINDS for e in _REG[k].values()
                                              if e.origin.startswith(str(folder))]
        _builtin_loaded = True
        folder = builtin_folder()
        if folder is None:
            return []
        try:
            return load_folder(folder)
        except BaseException:
            _builtin_loaded = False
            raise


def _ensure_builtin() -> None:
    if not _builtin_loaded:
        load_builtin()


def load_source(text: str, name: str, *, check: bool = False) -> builtins.list[Entry]:
    """Load entries from source text (a notebook cell); re-running the same `name` replaces them."""
    origin = f"<cell:{name}>"
    modname = _module_name(f"{MODULE_ROOT}.cells.{_ident(name)}", origin)
    lines = text.splitlines(keepends=True)
    linecache.cache[origin] = (len(text), None, lines, origin)   # tracebacks and inspect show the cell

    def body(mod):
        exec(compile(text, origin, "exec"), mod.__dict__)

    def new_module(n):
        m = types.ModuleType(n)
        m.__file__ = origin
        return m
    return _run_loader(origin, modname, check, body, new_module)


CHECKS: dict[str, builtins.list[Callable[[Entry], builtins.list[str]]]] = {k: [] for k in KINDS}


def checker(kind: str) -> Callable:
    """Decorator adding a conformance check `fn(entry) -> list[str]` (failed checks) for one kind."""
    def deco(fn):
        CHECKS[_kind(kind)].append(fn)
        return fn
    return deco


def check_entry(entry: Entry) -> builtins.list[str]:
    """Failed checks, each 'check-name: what is wrong'; [] means the entry conforms."""
    failed = _check_params(entry)
    for fn in CHECKS.get(entry.kind, []):
        try:
            failed += fn(entry)
        except Exception as e:  # a crash in a check is a failure of the entry, reported, not raised
            failed.append(f"{fn.__name__}: raised {type(e).__name__}: {e}")
    return failed


def _check_params(entry: Entry) -> builtins.list[str]:
    failed = []
    for k, p in entry.params.items():
        try:
            p.validate(k, p.default, entry.where)
        except CatalogError as e:
            failed.append(f"param-defaults: default of {k!r} fails its own declaration ({e.diagnostic.message})")
    try:
        sig = inspect.signature(entry.obj)
    except (TypeError, ValueError):
        return failed
    if any(q.kind == q.VAR_KEYWORD for q in sig.parameters.values()):
        return failed
    for k, p in entry.params.items():
        q = sig.parameters.get(k)
        if q is None:
            failed.append(f"params-match-signature: {k!r} is declared but not a keyword of {entry.obj.__name__}()")
        elif q.default is not q.empty and q.default != p.default and not (
                isinstance(q.default, (tuple, builtins.list)) and tuple(q.default) == tuple(p.default or ())):
            failed.append(f"params-match-signature: {k!r} defaults to {q.default!r} in the code but "
                          f"{p.default!r} in its Param")
    return failed


# ---- optimizers: helpers the engine and the tests share ----------------------------------------------
def initial_state(opt: Any, shape: tuple, dtype: str) -> dict[str, np.ndarray]:
    """The optimizer's state at step 0: its init_state() where defined, zeros for the rest."""
    decls = opt.state(tuple(shape), dtype)
    given = dict(opt.init_state(tuple(shape), dtype)) if hasattr(opt, "init_state") else {}
    out = {}
    for d in decls:
        a = given.get(d.name)
        out[d.name] = (np.zeros(d.shape, dt.to_numpy(d.dtype)) if a is None
                       else np.asarray(a).astype(dt.to_numpy(d.dtype)).reshape(d.shape))
    return out


def state_bytes(opt: Any, shape: tuple, dtype: str) -> int:
    """Bytes of optimizer state one parameter of this shape/dtype costs (what the planner counts)."""
    return sum(d.nbytes for d in opt.state(tuple(shape), dtype))


def _bad_decls(decls: Any) -> str:
    if not isinstance(decls, (builtins.list, tuple)):
        return f"state() must return a list of StateDecl, got {type(decls).__name__}"
    seen = set()
    for d in decls:
        if not isinstance(d, StateDecl):
            return f"{d!r} is not a StateDecl"
        if not isinstance(d.name, str) or not d.name.isidentifier():
            return f"state name {d.name!r} is not an identifier"
        if d.name in seen:
            return f"state name {d.name!r} is declared twice"
        if any(s < 0 for s in d.shape):
            return f"state {d.name!r} has a negative size in {d.shape}"
        seen.add(d.name)
    return ""


def _reset_for_tests() -> None:
    """Forget every entry (tests only)."""
    global _builtin_loaded
    with _LOCK:
        for k in KINDS:
            _REG[k].clear()
        _builtin_loaded = False


list = list_entries  # noqa: A001 - `catalog.list(kind)` is the public name; builtins.list is used above
