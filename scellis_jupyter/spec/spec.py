"""`Spec`: one TOML text describing data, model, recipe and plan, validated with line:col diagnostics.

Why TOML and one object: a `%%scellis` cell, a file and the Python API all produce the same Spec, whose
hash (of the parsed content, so comments and layout do not count) names the experiment in run records.
Every problem is reported where the user typed it; `Spec.check` lists them all, `from_text` raises the first.
"""
from __future__ import annotations

import copy
import datetime as _dt
import functools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import blake3

from ..errors import Diagnostic, did_you_mean
from . import adversarial as adv
from ..data.info import DatasetInfo, dataset_info
from .layers import LAYERS, check_attrs
from .locate import Locator, format_path
from .model import ModelGraph, ModelSpec, NodeSpec, build_graph
from .pretrained import check_against as check_pretrained
from .pretrained import check_table as check_pretrained_table
from ..data.resources import resolve_resource
from .entries import _check_named, _check_optimizer, _check_scheduler, _named_table
from .source import decode as decode_spec
from .source import parse as parse_toml
from .schema import (CHECKPOINTING, DATA_KEYS, DEVICES, INPUT_DTYPES, INPUT_KEYS, KNOWN, LOSS_SCALE_KEYS, MAX_COUNT,
                     MAX_SIZE, MODEL_KEYS, NAME_RE, PEFT_KEYS, PLACEMENTS, PLAN_KEYS, PRECISIONS,
                     RECIPE_KEYS, SPLIT_KEYS, TIERS, TOP_KEYS, Checker, SpecError, kind_of, show)
from ..catalog.losses import recipe_loss, target_of
from ..errors import ScellisError
from ..data.memory import MemoryData
from ..catalog.registry import CatalogError
from ..data.augment import AUGMENTATIONS, check_augmentation
from ..data.augment import SAMPLING
from ..catalog.regularizers import RegContext
from ..catalog.registry import make

DEFAULT_SPLIT = {"train": 0.8, "val": 0.1, "test": 0.1}
# Losses on class scores against class ids, whose argmax is the predicted class: a classification recipe with
# one of them and no `metrics` reports accuracy (a regression one reports its loss, as with no metrics at all).
ACCURACY_LOSSES = ("cross_entropy", "nll", "multi_margin")
SYNTHETIC_ONLY = ("n_rows", "n_features", "n_classes", "noise")


@dataclass(frozen=True)
class Spec:
    name: str
    data: dict
    model: ModelSpec
    recipe: dict
    plan: dict
    text: str = field(repr=False)
    source: str = "<spec>"
    hash: str = ""
    base_dir: str | None = field(default=None, repr=False, compare=False)
    _locator: Locator | None = field(default=None, repr=False, compare=False)
    kind: str = "supervised"          # recipe.kind: "gan" trains the two networks of `models`
    models: dict = field(default_factory=dict)   # network name -> ModelSpec ([model.generator], ...)
    memory: Any = field(default=None, repr=False, compare=False)   # data.memory.MemoryData: kernel data

    # ---- construction ---------------------------------------------------------------------------------
    @classmethod
    def from_text(cls, text: str, source: str = "<spec>", base_dir: str | os.PathLike | None = None, *,
                  data: dict | None = None, namespace=None) -> "Spec":
        """Parse and validate; raises SpecError (where = 'source:line:col') for the first problem found.

        In-memory data: `data={"train": (X, y), "val": (Xv, yv), "test": df}` gives the parts directly;
        `namespace` (a mapping, e.g. `globals()`) is where `[data] train = "X_train, y_train"` looks names up.
        """
        diags, spec = _analyze(text, source, base_dir, data, namespace)
        if diags:
            raise SpecError.from_diagnostics(diags)
        return spec

    @classmethod
    def of(cls, spec: "Spec | str | os.PathLike", data: dict | None = None) -> "Spec":
        """A Spec from a Spec, spec text, or a spec file (a str path or a PathLike): what every API takes.
        `data` binds in-memory parts ({"train": (X, y), ...}) to it."""
        if isinstance(spec, Spec):
            return spec if data is None else spec.with_data(data)
        if isinstance(spec, os.PathLike):
            return cls.from_file(spec, data=data)
        if isinstance(spec, str):
            return cls.from_text(spec, data=data) if "\n" in spec or "=" in spec else cls.from_file(spec, data=data)
        raise SpecError(f"a spec is a Spec, spec text or a spec file path, got {type(spec).__name__}",
                        where="spec argument", hint='pass sc.Spec.from_text(...), the TOML text, or "path/to/spec.toml"')

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, data: dict | None = None) -> "Spec":
        """A spec file; dataset paths in it are relative to the file's folder."""
        p = Path(path)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            raise SpecError(f"spec file {str(p)!r} does not exist", where=str(p), kind="missing-file") from None
        except OSError as e:
            raise SpecError(f"spec file {str(p)!r} cannot be read: {e.strerror or e}", where=str(p),
                            kind="unreadable-file") from None
        text, bad = decode_spec(raw, str(p))
        if bad is not None:
            raise SpecError.from_diagnostics([bad])
        return cls.from_text(text, source=str(p), base_dir=p.parent, data=data)

    @staticmethod
    def check(text: str, source: str = "<spec>", base_dir: str | os.PathLike | None = None, *,
              data: dict | None = None, namespace=None) -> list[Diagnostic]:
        """Every problem in `text` (empty when it is a valid spec); never raises for a bad spec."""
        return _analyze(text, source, base_dir, data, namespace)[0]

    def with_data(self, data: dict) -> "Spec":
        """This spec on in-memory parts `{"train": (X, y), ...}` (re-validated against them)."""
        return Spec.from_text(self.text, self.source, self.base_dir, data=data)

    # ---- queries --------------------------------------------------------------------------------------
    def locate(self, path: Iterable, value: bool = False) -> str:
        """'source:line:col' of a key path such as ('recipe', 'optimizer', 'lr') (nearest ancestor if absent)."""
        loc = self._locator or Locator(self.text)
        line, col = loc.locate(tuple(path), value)
        return f"{self.source}:{line}:{col}"

    @functools.cached_property
    def dataset(self) -> DatasetInfo | None:
        """Metadata of [data] dataset (None without a [data] section)."""
        if self.memory is not None:
            return self.memory.info()
        if "dataset" not in self.data:
            return None
        return dataset_info(self.data["dataset"], self.data, where=self.locate(("data", "dataset"), True),
                            base_dir=self.base_dir)

    @property
    def input(self) -> dict | None:
        """{'shape': per-example shape, 'dtype': ...}: declared in [model] or [data], else the dataset's."""
        return _input_of(self.model, self.data, self.dataset)

    @functools.cached_property
    def graph(self) -> ModelGraph:
        """The model graph on this spec's input (names resolved, shapes inferred, parameters declared)."""
        if self.models:
            raise SpecError(f"spec {self.name!r} describes {len(self.models)} networks "
                            f"({', '.join(self.models)}), not one model", where=self.locate(("model",)),
                            hint="use spec.graphs[name]; train it with GANRun")
        inp = self.input
        if inp is None:
            raise SpecError("the model's input shape is unknown", where=self.locate(("model",)),
                            hint='declare [model] input = { shape = [...], dtype = "f32" }')
        return build_graph(self.model, inp["shape"], inp["dtype"])

    @functools.cached_property
    def graphs(self) -> dict[str, ModelGraph]:
        """Every network's graph by name: {"generator": ..., "discriminator": ...}, or {"model": graph}."""
        if not self.models:
            return {"model": self.graph}
        ck = Checker(self._locator or Locator(self.text), self.source)
        out = adv.build_networks(ck, self.models, _input_of(ModelSpec(()), self.data, self.dataset))
        if ck.diags:
            raise SpecError.from_diagnostics(ck.diags)
        return out

    def to_dict(self) -> dict:
        model = ({k: m.to_dict() for k, m in self.models.items()} if self.models else self.model.to_dict())
        return {"name": self.name, "data": copy.deepcopy(self.data), "model": model, "kind": self.kind,
                "recipe": copy.deepcopy(self.recipe), "plan": dict(self.plan), "hash": self.hash,
                "source": self.source}

    def __repr__(self) -> str:
        if self.models:
            nets = ", ".join(f"{k} {len(m.nodes)} nodes" for k, m in self.models.items())
            return f"Spec({self.name!r}, {self.kind}: {nets}, hash={self.hash[:12]})"
        return f"Spec({self.name!r}, {len(self.model.nodes)} nodes, hash={self.hash[:12]})"


def _check_model_fits_data(ck: Checker, model, graph, info: DatasetInfo | None, recipe: dict) -> None:
    """The model against its data: class count of a classifier or language model, embedding vocabulary.

    Why here: a model with 96 outputs for a 103-character text, or an embedding smaller than the token
    ids, plans fine and fails only at the first batch; the spec is where the user can fix it.
    """
    if info is None or not info.n_classes or not _class_targets(graph, recipe):
        return
    out = graph.spec.nodes[graph.output]
    classes = graph.output_shape[-1] if graph.output_shape else None
    if info.task in ("classification", "lm") and classes is not None and classes != info.n_classes:
        what = "token ids in" if info.task == "lm" else "classes in"
        ck.error(("model", "nodes", out.index), f"the model outputs {classes} classes but there are "
                 f"{info.n_classes} {what} dataset {info.name!r}", value=False, kind="shape",
                 hint=f"make the last node produce {info.n_classes} outputs (out = {info.n_classes})")
    if info.task == "lm":
        for n in graph.spec.nodes:
            if n.op == "embedding" and int(n.attrs.get("vocab", 0)) < info.n_classes:
                ck.error(("model", "nodes", n.index, "vocab"), f"embedding vocab {n.attrs.get('vocab')} is smaller "
                         f"than the {info.n_classes} token ids of dataset {info.name!r}", kind="shape",
                         hint=f"vocab = {info.n_classes}")


def _class_targets(graph, recipe: dict) -> bool:
    """Whether the recipe's loss declares class-id targets for this model's output (asks the catalog)."""
    if recipe.get("loss") is None:
        return False
    try:
        t = target_of(recipe_loss(recipe), tuple(graph.output_shape))
    except ScellisError:
        return False                     # reported by _check_training_fits_model
    return t.kind == "class"


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, dates as ISO text: equal content, equal bytes."""
    def default(v):
        if isinstance(v, (_dt.date, _dt.time, _dt.datetime)):
            return v.isoformat()
        raise TypeError(type(v).__name__)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default)


def spec_hash(parsed: dict) -> str:
    return blake3.blake3(canonical_json(parsed).encode("utf-8")).hexdigest()


# ---- analysis ---------------------------------------------------------------------------------------------
def _analyze(text: str, source: str, base_dir, given=None, namespace=None) -> tuple[list[Diagnostic], Spec | None]:
    if not isinstance(text, str):
        return [Diagnostic("spec", f"spec text must be a string, got {type(text).__name__}", source)], None
    raw, bad, text = parse_toml(text, source)
    if bad is not None:
        return [bad], None
    ck = Checker(Locator(text), source)
    ck.known_keys(raw, (), TOP_KEYS, "the top level")
    name = ck.string(raw, "name", (), None)
    ck.string(raw, "description", (), None)
    data = _check_data(ck, raw.get("data"), given is not None)
    model, models = _check_model(ck, raw, base_dir)
    info = None
    memory = None
    if not ck.diags and (given is not None or (data is not None and "train" in data)):
        memory = _memory_data(ck, data or {}, given, namespace)
        info = memory.info() if memory is not None else None
    if data is not None and "dataset" in data and not ck.diags:
        try:
            info = dataset_info(data["dataset"], data, where=ck.where(("data", "dataset"), True),
                                base_dir=base_dir)
        except SpecError as e:
            ck.diags.append(e.diagnostic)
        if isinstance(data.get("tokenizer"), str) and not ck.diags:
            try:
                resolve_resource(data["tokenizer"], base_dir, where=ck.where(("data", "tokenizer"), True),
                                 what="tokenizer")
            except SpecError as e:
                ck.diags.append(e.diagnostic)
    recipe = _check_recipe(ck, raw.get("recipe"), info)
    plan = _check_plan(ck, raw.get("plan"))
    if not ck.diags:
        adv.check_kind(ck, recipe["kind"], models, raw)
    if ck.diags:
        return sorted(ck.diags, key=_text_order), None
    if models:
        graphs = adv.build_networks(ck, models, _input_of(ModelSpec(()), data or {}, info))
        if ck.diags:
            return sorted(ck.diags, key=_text_order), None
        if name is None:
            name = Path(source).stem if source and not source.startswith("<") else "spec"
        spec = Spec(name, data or {}, model, recipe, plan, text, source, spec_hash(raw),
                    str(base_dir) if base_dir is not None else None, ck.locator, kind=recipe["kind"], models=models,
                    memory=memory)
        spec.__dict__["dataset"] = info
        spec.__dict__["graphs"] = graphs
        return [], spec
    inp = _input_of(model, data or {}, info)
    if memory is not None and inp is not None and info is not None and tuple(inp["shape"]) != tuple(info.feature_shape):
        ck.error(("model", "input") if model.input is not None else ("data", "input"),
                 f"the model takes examples of shape {list(inp['shape'])} but the in-memory data "
                 f"({memory.labels.get('train') or 'train'}) has examples of shape {list(info.feature_shape)}",
                 kind="shape", hint=f"shape = {list(info.feature_shape)}, or reshape the arrays")
        return ck.diags, None
    if inp is None:
        ck.error(("model",), "the model's input shape is unknown", value=False, kind="missing",
                 hint='add [data] dataset = "..." or [model] input = { shape = [...], dtype = "f32" }')
        return ck.diags, None
    try:
        graph = build_graph(model, inp["shape"], inp["dtype"])
    except SpecError as e:
        return [e.diagnostic], None
    _check_model_fits_data(ck, model, graph, info, recipe)
    _check_training_fits_model(ck, graph, info, recipe, inp)
    if model.pretrained is not None and not ck.diags:
        check_pretrained(ck, model.pretrained, graph)
    if ck.diags:
        return ck.diags, None
    if name is None:
        name = Path(source).stem if source and not source.startswith("<") else "spec"
    spec = Spec(name, data or {}, model, recipe, plan, text, source, spec_hash(raw),
                str(base_dir) if base_dir is not None else None, ck.locator, memory=memory)
    spec.__dict__["dataset"] = info          # cached_property values, already computed
    spec.__dict__["graph"] = graph
    return [], spec


def _text_order(d: Diagnostic) -> tuple[int, int]:
    """Diagnostics in the order their positions appear in the text."""
    parts = d.where.rsplit(":", 2)
    try:
        return int(parts[-2]), int(parts[-1])
    except (IndexError, ValueError):
        return 1 << 30, 0


def _input_of(model: ModelSpec, data: dict, info: DatasetInfo | None) -> dict | None:
    if model.input is not None:
        return model.input
    if data.get("input") is not None:
        return data["input"]
    if info is not None and info.feature_shape is not None:
        return {"shape": tuple(info.feature_shape), "dtype": info.feature_dtype or "f32"}
    return None


def _check_input(ck: Checker, v: Any, path: tuple) -> dict | None:
    t = ck.table(v, path, ' like { shape = [128], dtype = "i32" }')
    if t is None:
        return None
    ck.known_keys(t, path, INPUT_KEYS)
    if not ck.required(t, "shape", path):
        return None
    shape = t["shape"]
    p = path + ("shape",)
    if not isinstance(shape, list) or not shape:
        ck.error(p, f"{format_path(p)} must be a non-empty array of sizes, got {show(shape)} ({kind_of(shape)})",
                 kind="type", expected="array of int", got=shape)
        return None
    for j, s in enumerate(shape):
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= MAX_SIZE:
            ck.error(p + (j,), f"{format_path(p + (j,))} must be an integer between 1 and {MAX_SIZE}, got {show(s)}",
                     kind="range" if isinstance(s, int) else "type", got=s)
            return None
    dtype = ck.choice(t, "dtype", path, INPUT_DTYPES, "f32", "input dtype")
    return {"shape": tuple(shape), "dtype": dtype}


def _check_data(ck: Checker, v: Any, given: bool = False) -> dict | None:
    if v is None:
        return None
    path = ("data",)
    t = ck.table(v, path)
    if t is None:
        return None
    ck.known_keys(t, path, DATA_KEYS)
    out = dict(t)
    ds = ck.string(t, "dataset", path)
    parts = [k for k in SPLIT_KEYS if k in t]
    for k in parts:
        ck.string(t, k, path)
    ck.boolean(t, "standardize", path)
    if parts and ds is not None:
        ck.error(path + (parts[0],), f"[data] names both a dataset ({ds!r}) and in-memory parts ({', '.join(parts)})",
                 value=False, kind="conflict", hint="keep one: dataset = \"...\" or train = \"X_train, y_train\"")
    elif parts and "train" not in t:
        ck.error(path + (parts[0],), f"[data] names a {parts[0]} part but no train part", value=False,
                 kind="missing", hint='add train = "X_train, y_train"')
    elif parts and "split" in t and len(parts) > 1:
        ck.error(path + ("split",), f"split fractions apply when only train is named; {', '.join(parts[1:])} "
                 "is given explicitly", value=False, kind="conflict", hint="remove split, or the explicit parts")
    if ds is None and "input" not in t and not parts and not given:
        ck.required(t, "dataset", path)
    if ds is not None and not ds.startswith("synthetic_"):
        for k in SYNTHETIC_ONLY:
            if k in t and not (k == "n_rows" and ds == "pydoc_sentences"):
                ck.error(path + (k,), f"{k!r} applies to synthetic datasets only, not {ds!r}", value=False,
                         kind="unknown-key", hint=f"remove {k}, or use dataset = \"synthetic_classification\"")
    if ds == "synthetic_ring" and "n_features" in t:
        ck.error(path + ("n_features",), "synthetic_ring is 2-D: its examples have 2 features", value=False,
                 kind="unknown-key", hint="remove n_features (n_classes sets the number of modes)")
    if "split" in t:
        out["split"] = _check_split(ck, t["split"], path + ("split",))
    elif parts and len(parts) > 1:
        out.pop("split", None)               # explicit parts: the split is the parts themselves
    else:
        out["split"] = dict(DEFAULT_SPLIT)
    ck.integer(t, "seq_len", path, 1, 2 ** 20)
    if ds == "pydoc_topics":
        out.setdefault("seq_len", 128)
    _check_text_data(ck, t, path, ds, out)
    ck.integer(t, "n_rows", path, 1, MAX_COUNT)
    ck.integer(t, "n_features", path, 1, MAX_SIZE)
    ck.integer(t, "n_classes", path, 2, MAX_SIZE)
    ck.number(t, "noise", path, 0.0, 1e6)
    ck.string(t, "target", path)
    ck.boolean(t, "shuffle", path)
    ck.choice(t, "placement", path, PLACEMENTS, "stream", "data placement")
    if "memory_budget" in t:
        out["memory_budget"] = ck.size(t, "memory_budget", path, '"64MiB"')
    if "input" in t:
        out["input"] = _check_input(ck, t["input"], path + ("input",))
    return out


def _memory_data(ck: Checker, data: dict, given, namespace):
    """The in-memory parts (data= or [data] train = "X, y" names looked up in `namespace`), or None with a
    diagnostic at the [data] line that names them."""
    where_of = lambda part: ck.where(("data", part), True) if part in data else ck.where(("data",))  # noqa: E731
    try:
        if isinstance(given, MemoryData):           # as the store kept it (verify, resume)
            given._check(where_of("train"))
            return given
        if given is not None:
            if not isinstance(given, dict):
                given = {"train": given}
            return MemoryData.from_parts(given, target=data.get("target"), where=where_of("train"),
                                         target_where=where_of("target"))
        if namespace is None:
            ck.error(("data", "train"), f"train = {data['train']!r} names data in a Python session, and no "
                     "namespace was given to look it up in", kind="missing",
                     hint="in a notebook use a %%scellis cell; in Python pass Spec.from_text(text, namespace=globals()) "
                          "or data={\"train\": (X, y)}")
            return None
        return MemoryData.from_names(data, namespace, where_of)
    except ScellisError as e:
        d = e.diagnostic
        ck.diags.append(Diagnostic("spec", d.message, d.where or where_of("train"), d.hint, {"kind": "data"}))
        return None


def _check_text_data(ck: Checker, t: dict, path: tuple, ds: str | None, out: dict) -> None:
    """tokenizer / text: a text dataset is tokenized to seq_len ids (data/text.py)."""
    tok = ck.string(t, "tokenizer", path)
    ck.string(t, "text", path)
    if ds == "pydoc_sentences" and "tokenizer" not in t:
        ck.error(path, "dataset 'pydoc_sentences' is text: [data] needs a tokenizer", value=False, kind="missing",
                 key="tokenizer", hint='tokenizer = "tokenizer.json" (a Hugging Face tokenizers file, or '
                 '"package:<pkg>/<path>")')
    if tok is not None:
        out.setdefault("seq_len", 128)
        if ds is not None and ds in KNOWN["dataset"] and ds != "pydoc_sentences":
            ck.error(path + ("tokenizer",), f"dataset {ds!r} is not text; a tokenizer applies to text datasets "
                     "(pydoc_sentences, or a .csv/.tsv/.jsonl file with a text column)", value=False,
                     kind="unknown-key")
    elif "text" in t:
        ck.error(path + ("text",), "text names the text column of a tokenized dataset, but [data] has no "
                 "tokenizer", value=False, kind="missing", hint='add tokenizer = "tokenizer.json"')


def _check_split(ck: Checker, v: Any, path: tuple) -> dict | None:
    t = ck.table(v, path, " like { train = 0.8, val = 0.1, test = 0.1 }")
    if t is None:
        return None
    bad = len(ck.diags)
    ck.known_keys(t, path, SPLIT_KEYS, "the split")
    fr = {k: ck.number(t, k, path, 0.0, 1.0, lo_open=True) for k in SPLIT_KEYS if k in t}
    if "train" not in t:
        ck.required(t, "train", path)
    if len(ck.diags) > bad:
        return None
    total = math.fsum(fr.values())
    if abs(total - 1.0) > 1e-6:
        parts = " + ".join(f"{x:g}" for x in fr.values())
        ck.error(path, f"split fractions must sum to 1, got {parts} = {total:g}", kind="range",
                 hint="adjust them so train + val + test = 1", got=total)
        return None
    return {k: fr[k] for k in SPLIT_KEYS if k in fr}


def _check_model(ck: Checker, raw: dict, base_dir=None) -> tuple[ModelSpec, dict[str, ModelSpec]]:
    """[model] as one network, or as the named networks of a two-network model ([model.generator], ...)."""
    path = ("model",)
    if "model" not in raw:
        ck.required(raw, "model", ())
        return ModelSpec((), source=ck.source), {}
    t = ck.table(raw["model"], path)
    if t is None:
        return ModelSpec((), source=ck.source), {}
    if any(k in t for k in adv.NETWORKS):
        return ModelSpec((), source=ck.source), adv.check_networks(
            ck, t, path, lambda c, tab, p: _check_model_table(c, tab, p, base_dir))
    return _check_model_table(ck, t, path, base_dir), {}


def _check_model_table(ck: Checker, t: dict, path: tuple, base_dir=None) -> ModelSpec:
    ck.known_keys(t, path, MODEL_KEYS)
    nodes: list[NodeSpec] = []
    if ck.required(t, "nodes", path):
        arr = t["nodes"]
        npath = path + ("nodes",)
        if not isinstance(arr, list) or not arr:
            ck.error(npath, f"{format_path(npath)} must be a non-empty array of tables like {{ op = \"linear\", out = 10 }},"
                     f" got {show(arr)}", kind="type")
        else:
            for i, node in enumerate(arr):
                ns = _check_node(ck, node, npath + (i,), i)
                if ns is not None:
                    nodes.append(ns)
    output = ck.string(t, "output", path)
    inp = _check_input(ck, t["input"], path + ("input",)) if "input" in t else None
    out_pos = ck.locator.locate(path + ("output",), True) if "output" in t else None
    pre = check_pretrained_table(ck, t["pretrained"], path + ("pretrained",), base_dir) if "pretrained" in t else None
    return ModelSpec(tuple(nodes), output, inp, ck.source, out_pos, pre)


def _check_node(ck: Checker, node: Any, path: tuple, i: int) -> NodeSpec | None:
    t = ck.table(node, path, ' like { op = "linear", out = 10 }')
    if t is None:
        return None
    if "op" not in t:
        ck.error(path, f"{format_path(path)} needs 'op'", f"ops: {', '.join(LAYERS)}", value=False, kind="missing")
        return None
    op = ck.string(t, "op", path)
    if op is None:
        return None
    if op not in LAYERS:
        ck.error(path + ("op",), f"unknown op {op!r}", did_you_mean(op, LAYERS) or f"ops: {', '.join(LAYERS)}",
                 kind="unknown-op", got=op)
        return None
    bad = len(ck.diags)
    name = ck.string(t, "name", path)
    if name is not None and not NAME_RE.match(name):
        ck.error(path + ("name",), f"node name {name!r} must start with a letter or '_' and use letters, digits, "
                 "'_' or '-'", kind="invalid", got=name)
    ins = None
    if "in" in t:
        v = t["in"]
        if isinstance(v, str):
            ins = (v,)
        elif isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            ins = tuple(v)
        else:
            ck.error(path + ("in",), f"{format_path(path + ('in',))} must be a node name or an array of names, "
                     f"got {show(v)} ({kind_of(v)})", kind="type", got=v)
    attrs = check_attrs(LAYERS[op], t, path, ck)
    if len(ck.diags) > bad:
        return None
    loc = ck.locator
    pos = {"op": loc.locate(path + ("op",), True)}
    if "name" in t:
        pos["name"] = loc.locate(path + ("name",), True)
    if ins is not None:
        pos["in"] = loc.locate(path + ("in",), True)
        for j in range(len(ins)):
            pos[("in", j)] = loc.locate(path + ("in", j), True) if isinstance(t["in"], list) else pos["in"]
    for k in attrs:
        if k in t:
            pos[k] = loc.locate(path + (k,), True)
    line, col = loc.locate(path)
    return NodeSpec(i, op, attrs, name, ins, line, col, pos)


def _check_recipe(ck: Checker, v: Any, info: DatasetInfo | None) -> dict:
    path = ("recipe",)
    t = {} if v is None else ck.table(v, path)
    if t is None:
        t = {}
    ck.known_keys(t, path, RECIPE_KEYS)
    task = info.task if info is not None else None
    r: dict[str, Any] = {}
    r["kind"] = ck.choice(t, "kind", path, adv.KINDS, "supervised", "recipe kind")
    gan = r["kind"] == "gan"
    if gan:
        r["loss"], r["loss_params"] = ck.choice(t, "loss", path, adv.GAN_LOSSES, "non_saturating", "GAN loss"), {}
    else:
        r["loss"], r["loss_params"] = _check_loss(ck, t, path, "mse" if task == "regression" else "cross_entropy")
    r["optimizer"] = _named_table(ck, t, "optimizer", path, "adamw", _check_optimizer)
    r["scheduler"] = _named_table(ck, t, "scheduler", path, "constant", _check_scheduler)
    r["epochs"] = ck.integer(t, "epochs", path, 1, 10 ** 6, 1)
    r["steps"] = ck.integer(t, "steps", path, 1, MAX_COUNT, None)
    r["batch_size"] = ck.integer(t, "batch_size", path, 1, 2 ** 20, 32)
    r["grad_accum_steps"] = ck.integer(t, "grad_accum_steps", path, 1, 65536, 1)
    r["eval_every"] = ck.integer(t, "eval_every", path, 1, MAX_COUNT, None)
    r["max_skipped_steps"] = ck.integer(t, "max_skipped_steps", path, 1, MAX_COUNT, None)
    r["precision"] = ck.choice(t, "precision", path, PRECISIONS, "fp32", "precision")
    r["clip_grad_norm"] = ck.number(t, "clip_grad_norm", path, 0.0, 1e6, None, lo_open=True)
    r["clip_grad_value"] = ck.number(t, "clip_grad_value", path, 0.0, 1e6, None, lo_open=True)
    r["metrics"] = _check_metrics(ck, t, path)
    if "metrics" not in t and not gan and task == "classification" and r["loss"] in ACCURACY_LOSSES:
        r["metrics"], r["default_metrics"] = ["accuracy"], True     # the plan says it was defaulted
    r["determinism"] = ck.choice(t, "determinism", path, TIERS, None, "determinism tier")
    r["seed"] = ck.integer(t, "seed", path, 0, 2 ** 63 - 1, 0)
    r["checkpointing"] = ck.choice(t, "checkpointing", path, CHECKPOINTING, "none", "checkpointing mode")
    r["peft"] = _check_peft(ck, t["peft"], path + ("peft",)) if "peft" in t else None
    r["ema"] = ck.number(t, "ema", path, 0.0, 1.0, None, lo_open=True, hi_open=True)
    r["swa_start"] = ck.integer(t, "swa_start", path, 0, MAX_COUNT, None)
    r["swa_every"] = ck.integer(t, "swa_every", path, 1, MAX_COUNT, None)
    if gan:
        adv.check_gan_recipe(ck, t, path, r)
    else:
        adv.refuse_gan_keys(ck, t, path)
        if "loss_scale" in t:
            r["loss_scale"] = _check_loss_scale(ck, t, path, r["precision"])
        r["regularizers"] = _check_entry_list(ck, t, "regularizers", path, "regularizer")
        r["augment"] = _check_augment(ck, t, path)
        r["sampling"] = _check_sampling(ck, t, path, info)
    return r


def _check_loss_scale(ck: Checker, t: dict, path: tuple, precision: str | None) -> dict | None:
    """Dynamic loss scaling with torch.amp.GradScaler's knobs, or a number for a static scale."""
    p = path + ("loss_scale",)
    v = t["loss_scale"]
    if precision != "mixed-f16":
        ck.error(p, f"loss_scale applies to precision \"mixed-f16\" only, not {precision!r}", value=False,
                 hint="remove loss_scale, or set precision = \"mixed-f16\"")
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        n = ck.number(t, "loss_scale", path, 0.0, 2.0 ** 64, lo_open=True)
        return None if n is None else {"init": float(n), "growth_factor": 1.0, "backoff_factor": 1.0,
                                       "growth_interval": MAX_COUNT}
    tab = ck.table(v, p, " like { init = 65536.0, growth_interval = 2000 } or a number for a static scale")
    if tab is None:
        return None
    ck.known_keys(tab, p, LOSS_SCALE_KEYS, "loss_scale")
    return {"init": ck.number(tab, "init", p, 0.0, 2.0 ** 64, 2.0 ** 16, lo_open=True),
            "growth_factor": ck.number(tab, "growth_factor", p, 1.0, 1e3, 2.0),
            "backoff_factor": ck.number(tab, "backoff_factor", p, 0.0, 1.0, 0.5, lo_open=True),
            "growth_interval": ck.integer(tab, "growth_interval", p, 1, MAX_COUNT, 2000)}


# ---- catalog entries named in the recipe: names from the registry (user entries too), params checked ----


def _check_loss(ck: Checker, t: dict, path: tuple, default: str) -> tuple[str | None, dict]:
    p = path + ("loss",)
    if "loss" not in t:
        return default, {}
    name, params = _check_named(ck, t["loss"], p, "loss", "loss")
    if params.get("reduction") == "none":
        ck.error(p + ("reduction",), "reduction 'none' gives one loss per element; training needs a number",
                 'use reduction = "mean" or "sum"', kind="range", got="none")
    return name, params


def _check_entry_list(ck: Checker, t: dict, key: str, path: tuple, kind: str) -> list:
    """An array of catalog entries ({ name, params } or names): [{name, **params}, ...]."""
    if key not in t:
        return []
    v = t[key]
    p = path + (key,)
    if not isinstance(v, list):
        ck.error(p, f"recipe.{key} must be an array like [{{ name = \"...\" }}], got {show(v)} ({kind_of(v)})",
                 kind="type", got=v)
        return []
    out, seen = [], set()
    for j, item in enumerate(v):
        name, params = _check_named(ck, item, p + (j,), kind, kind)
        if name is None:
            continue
        if name in seen:
            ck.error(p + (j,), f"{kind} {name!r} is listed twice", "keep one", value=False, kind="duplicate")
        seen.add(name)
        out.append({"name": name, **params})
    return out


def _check_augment(ck: Checker, t: dict, path: tuple) -> list:
    if "augment" not in t:
        return []
    v, p = t["augment"], path + ("augment",)
    if not isinstance(v, list):
        ck.error(p, f"recipe.augment must be an array like [{{ name = \"hflip\" }}], got {show(v)} ({kind_of(v)})",
                 kind="type", got=v)
        return []
    out = []
    for j, item in enumerate(v):
        q = p + (j,)
        tab = {"name": item} if isinstance(item, str) else ck.table(item, q, " like { name = \"hflip\" }")
        if tab is None or not ck.required(tab, "name", q):
            continue
        if not isinstance(tab["name"], str) or ck.name_in(tab["name"], q + (("name",) if isinstance(item, dict) else ()),
                                                        AUGMENTATIONS, "augmentation") is None:
            continue
        try:
            out.append({"name": tab["name"], **check_augmentation(tab)})
        except CatalogError as e:
            key = e.diagnostic.details.get("key")
            ck.error(q + ((key,) if key and isinstance(item, dict) and key in tab else ()), e.diagnostic.message,
                     e.diagnostic.hint, kind="range")
    return out


def _check_sampling(ck: Checker, t: dict, path: tuple, info: DatasetInfo | None) -> Any:
    if "sampling" not in t:
        return None
    v, p = t["sampling"], path + ("sampling",)
    if isinstance(v, str):
        got = ck.name_in(v, p, SAMPLING, "sampling")
        if got == "balanced" and info is not None and info.task not in ("classification", "unknown"):
            ck.error(p, f"balanced sampling needs class labels; dataset {info.name!r} is {info.task}", kind="invalid",
                     hint="remove sampling")
        return None if got == "uniform" else got
    tab = ck.table(v, p, ' like "balanced" or { class_weights = [1.0, 3.0] }')
    if tab is None:
        return None
    ck.known_keys(tab, p, ("class_weights",), "sampling")
    if not ck.required(tab, "class_weights", p):
        return None
    w = tab["class_weights"]
    q = p + ("class_weights",)
    ok = isinstance(w, list) and w and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                           and math.isfinite(x) and x >= 0 for x in w) and sum(w) > 0
    if not ok:
        ck.error(q, f"{format_path(q)} must be an array of weights >= 0, not all 0, got {show(w)}", kind="range", got=w)
        return None
    if info is not None and info.n_classes and info.task == "classification" and len(w) != info.n_classes:
        ck.error(q, f"{len(w)} class weights for the {info.n_classes} classes of dataset {info.name!r}",
                 f"give one weight per class ({info.n_classes})", kind="shape", got=w)
        return None
    return {"class_weights": [float(x) for x in w]}


def _check_training_fits_model(ck: Checker, graph, info: DatasetInfo | None, recipe: dict, inp: dict) -> None:
    """The loss reads the model's output (multi-input losses need their [2, D] / [3, D] layout), each
    regularizer applies to this model and loss, augmentations fit the input; errors at their entries."""
    name = recipe.get("loss")
    if name is None:
        return
    try:
        loss = recipe_loss(recipe)
        target = target_of(loss, tuple(graph.output_shape))
    except ScellisError as e:
        ck.error(("recipe", "loss"), e.diagnostic.message, e.diagnostic.hint, kind="invalid")
        return
    ctx = RegContext(graph, loss, target, int(recipe.get("batch_size") or 32) * int(recipe.get("grad_accum_steps") or 1),
                     tuple(inp["shape"]), inp["dtype"], tuple(p.name for p in graph.params))
    for j, cfg in enumerate(recipe.get("regularizers") or []):
        cfg = dict(cfg)
        try:
            make("regularizer", cfg.pop("name"), **cfg).apply(ctx)
        except ScellisError as e:
            ck.error(("recipe", "regularizers", j), e.diagnostic.message, e.diagnostic.hint, value=False,
                     kind="invalid")
    for j, cfg in enumerate(recipe.get("augment") or []):
        try:
            check_augmentation(cfg, tuple(inp["shape"]), inp["dtype"])
        except ScellisError as e:
            ck.error(("recipe", "augment", j), e.diagnostic.message, e.diagnostic.hint, value=False, kind="invalid")


def _check_metrics(ck: Checker, t: dict, path: tuple) -> list:
    if "metrics" not in t:
        return []
    v = t["metrics"]
    p = path + ("metrics",)
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        ck.error(p, f"recipe.metrics must be an array of metric names, got {show(v)} ({kind_of(v)})", kind="type",
                 got=v)
        return []
    out = []
    for j, m in enumerate(items):
        got = ck.name_in(m, p + (j,) if isinstance(v, list) else p, KNOWN["metric"], "metric")
        if got is not None:
            out.append(got)
    return out


def _check_peft(ck: Checker, v: Any, p: tuple) -> dict | None:
    t = ck.table(v, p, ' like { method = "lora", rank = 8 }')
    if t is None:
        return None
    ck.known_keys(t, p, PEFT_KEYS, "peft")
    if not ck.required(t, "method", p):
        return None
    method = ck.choice(t, "method", p, KNOWN["peft"], None, "peft method")
    out = {"method": method,
           "rank": ck.integer(t, "rank", p, 1, 4096, 8),
           "alpha": ck.number(t, "alpha", p, 0.0, 1e6, 16.0, lo_open=True),
           "dropout": ck.number(t, "dropout", p, 0.0, 1.0, 0.0, hi_open=True)}
    targets = t.get("targets", ["linear"])
    if not isinstance(targets, list) or not targets or not all(isinstance(x, str) and x for x in targets):
        ck.error(p + ("targets",), f"{format_path(p + ('targets',))} must be a non-empty array of op or parameter "
                 f"names, got {show(targets)}", kind="type", got=targets)
    out["targets"] = list(targets) if isinstance(targets, list) else targets
    if "bits" in t:
        b = t["bits"]
        if b not in (4, 8) or isinstance(b, bool):
            ck.error(p + ("bits",), f"{format_path(p + ('bits',))} must be 4 or 8, got {show(b)}", kind="range", got=b)
        out["bits"] = b
    if "num_virtual_tokens" in t:
        out["num_virtual_tokens"] = ck.integer(t, "num_virtual_tokens", p, 1, 4096)
    return out


def _check_plan(ck: Checker, v: Any) -> dict:
    if v is None:
        return {}
    path = ("plan",)
    t = ck.table(v, path)
    if t is None:
        return {}
    ck.known_keys(t, path, PLAN_KEYS)
    out: dict[str, Any] = {}
    if "memory" in t:
        out["memory"] = ck.size(t, "memory", path, '"8GiB" or "512MiB"')
    out["device"] = ck.choice(t, "device", path, DEVICES, "auto", "plan device")
    return out
