"""What a spec may say: the name tables, the allowed keys of every section, and the typed checks.

Why one place: the validator, the did-you-mean hints and the docs all read the same tables, so a key
the engine accepts is a key the checker knows. `KNOWN` is a stand-in for the catalog registry that a
later stage provides; it stays one dict so that swap is one line.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..data.info import BUILTIN_DATASETS
from ..errors import Diagnostic, SpecError, did_you_mean  # noqa: F401 - SpecError: its old home, still imported from here
from .locate import Locator, format_path

KNOWN: dict[str, tuple[str, ...]] = {
    "optimizer": ("adam", "adamw", "sgd", "lamb", "adafactor", "lion", "sophia", "int8adam", "prodigy"),
    "loss": ("mse", "l1", "smooth_l1", "huber", "bce", "bce_with_logits", "cross_entropy", "nll", "kl_div",
             "focal", "info_nce", "triplet_margin", "cosine_embedding", "margin_ranking", "poisson_nll",
             "multi_margin"),
    "scheduler": ("constant", "linear", "warmup", "cosine", "cosine_restarts", "one_cycle", "cyclic", "step",
                  "multistep", "exponential", "polynomial", "inverse_sqrt", "reduce_on_plateau",
                  "warmup_cosine"),
    "metric": ("accuracy", "f1", "precision", "recall", "confusion_matrix", "perplexity", "auroc", "auprc",
               "ece", "brier"),
    "init": ("xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal",
             "truncated_normal", "sparse", "normal", "uniform", "constant", "zeros", "ones", "pretrained"),
    "dataset": BUILTIN_DATASETS,
    "peft": ("lora", "qlora", "prefix_tuning", "bitfit", "ia3", "prompt_tuning"),
}

PRECISIONS = ("fp32", "mixed-f16", "f16")
TIERS = ("debug", "prod", "fast")
CHECKPOINTING = ("none", "activations")
DEVICES = ("auto", "wgpu", "reference", "browser")     # browser: the WebGPU of the page showing the notebook
INPUT_DTYPES = ("f32", "f16", "i32")

MAX_SIZE = 2 ** 24          # any single dimension: features, vocab, channels
MAX_COUNT = 10 ** 9         # steps, rows, warmup steps

TOP_KEYS = ("name", "description", "data", "model", "recipe", "plan")
DATA_KEYS = ("dataset", "split", "seq_len", "n_rows", "n_features", "n_classes", "noise", "input", "target",
             "shuffle", "placement", "memory_budget", "tokenizer", "text", "train", "val", "test", "standardize")
PLACEMENTS = ("stream", "device")
MODEL_KEYS = ("nodes", "output", "input", "pretrained")
SPLIT_KEYS = ("train", "val", "test")
INPUT_KEYS = ("shape", "dtype")
NODE_KEYS = ("name", "op", "in")
RECIPE_KEYS = ("loss", "optimizer", "scheduler", "epochs", "steps", "batch_size", "precision", "clip_grad_norm",
               "clip_grad_value", "metrics", "determinism", "seed", "grad_accum_steps", "checkpointing", "peft", "ema",
               "swa_start", "swa_every",
               "eval_every", "max_skipped_steps", "loss_scale", "regularizers", "sampling", "augment", "kind", "generator",
               "discriminator", "noise", "d_steps", "g_steps")
LOSS_SCALE_KEYS = ("init", "growth_factor", "backoff_factor", "growth_interval")
OPTIMIZER_KEYS = ("name", "lr", "weight_decay", "betas", "beta1", "beta2", "momentum", "eps", "nesterov",
                  "dampening", "amsgrad")
SCHEDULER_KEYS = ("name", "warmup_steps", "min_lr", "total_steps", "step_size", "gamma", "milestones", "cycles",
                  "power", "factor", "patience", "max_lr", "base_lr", "pct_start", "restart_every")
PEFT_KEYS = ("method", "rank", "alpha", "dropout", "targets", "bits", "num_virtual_tokens")
PLAN_KEYS = ("memory", "device")

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


_MISSING = object()


def kind_of(v: Any) -> str:
    """How a TOML value reads to a user: 'a string', 'an integer', ..."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a float"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "a table"
    return type(v).__name__


def show(v: Any) -> str:
    """A value as TOML would spell it, shortened."""
    if isinstance(v, bool):
        s = "true" if v else "false"
    elif isinstance(v, str):
        s = '"' + v.replace('"', '\\"') + '"'
    elif isinstance(v, list):
        s = "[" + ", ".join(show(x) for x in v) + "]"
    elif isinstance(v, dict):
        s = "{ " + ", ".join(f"{k} = {show(x)}" for k, x in v.items()) + " }"
    else:
        s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


@dataclass
class Checker:
    """Collects diagnostics while walking the parsed spec; every one is pinned to a line:col."""

    locator: Locator
    source: str
    diags: list[Diagnostic] = field(default_factory=list)

    def where(self, path: Iterable, value: bool = False) -> str:
        line, col = self.locator.locate(tuple(path), value)
        return f"{self.source}:{line}:{col}"

    def error(self, path: Iterable, message: str, hint: str = "", value: bool = True, kind: str = "invalid",
              **details) -> None:
        path = tuple(path)
        self.diags.append(Diagnostic("spec", message, self.where(path, value), hint,
                                     {"kind": kind, "path": format_path(path), **details}))

    # ---- keys -----------------------------------------------------------------------------------------
    def table(self, v: Any, path: tuple, what: str = "") -> dict | None:
        if isinstance(v, dict):
            return v
        self.error(path, f"{format_path(path)} must be a table{what}, got {show(v)} ({kind_of(v)})",
                   kind="type", expected="table", got=v)
        return None

    def known_keys(self, table: dict, path: tuple, allowed: Iterable[str], what: str = "") -> None:
        allowed = tuple(allowed)
        for k in table:
            if k not in allowed:
                where = f"[{format_path(path)}]" if path else "the top level"
                hint = did_you_mean(k, allowed) or f"{what or where} takes: {', '.join(allowed)}"
                self.error(path + (k,), f"unknown key {k!r} in {what or where}", hint, value=False,
                           kind="unknown-key", key=k)

    def required(self, table: dict, key: str, path: tuple) -> bool:
        if key in table:
            return True
        if did_you_mean(key, [k for k in table if isinstance(k, str)]):
            return False  # a misspelling of it is already reported as an unknown key, with the fix
        self.error(path, f"{format_path(path) or 'the spec'} needs {key!r}", kind="missing", key=key)
        return False

    # ---- typed values ---------------------------------------------------------------------------------
    def integer(self, table: dict, key: str, path: tuple, lo: int, hi: int, default: Any = _MISSING) -> Any:
        p = path + (key,)
        if key not in table:
            return None if default is _MISSING else default
        v = table[key]
        if isinstance(v, bool) or not isinstance(v, int):
            hint = f"write {key} = {int(v)}" if isinstance(v, float) and v.is_integer() else (
                f"write {key} = {v.strip()}" if isinstance(v, str) and v.strip().isdigit() else "")
            self.error(p, f"{format_path(p)} must be an integer, got {show(v)} ({kind_of(v)})", hint,
                       kind="type", expected="integer", got=v)
            return default if default is not _MISSING else None
        if not lo <= v <= hi:
            self.error(p, f"{format_path(p)} must be {_range_text(lo, hi)}, got {v}", kind="range",
                       expected=_range_text(lo, hi), got=v)
            return default if default is not _MISSING else None
        return v

    def number(self, table: dict, key: str, path: tuple, lo: float, hi: float, default: Any = _MISSING,
               lo_open: bool = False, hi_open: bool = False) -> Any:
        p = path + (key,)
        if key not in table:
            return None if default is _MISSING else default
        v = table[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            hint = ""
            if isinstance(v, str):
                try:
                    hint = f"write {key} = {float(v)!r} (no quotes)"
                except ValueError:
                    pass
            self.error(p, f"{format_path(p)} must be a number, got {show(v)} ({kind_of(v)})", hint,
                       kind="type", expected="number", got=v)
            return default if default is not _MISSING else None
        try:
            fv = float(v)                  # an integer past float's range is out of any range a spec takes
        except OverflowError:
            fv = math.inf if v > 0 else -math.inf
        ok = math.isfinite(fv) and (lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi)
        if not ok:
            rng = _interval(lo, hi, lo_open, hi_open)
            self.error(p, f"{format_path(p)} must be in {rng}, got {v!r}", kind="range", expected=rng, got=v)
            return default if default is not _MISSING else None
        return float(v)

    def boolean(self, table: dict, key: str, path: tuple, default: Any = _MISSING) -> Any:
        p = path + (key,)
        if key not in table:
            return None if default is _MISSING else default
        v = table[key]
        if not isinstance(v, bool):
            self.error(p, f"{format_path(p)} must be true or false, got {show(v)} ({kind_of(v)})", kind="type",
                       expected="boolean", got=v)
            return default if default is not _MISSING else None
        return v

    def string(self, table: dict, key: str, path: tuple, default: Any = _MISSING) -> Any:
        p = path + (key,)
        if key not in table:
            return None if default is _MISSING else default
        v = table[key]
        if not isinstance(v, str):
            self.error(p, f"{format_path(p)} must be a string, got {show(v)} ({kind_of(v)})", kind="type",
                       expected="string", got=v)
            return default if default is not _MISSING else None
        return v

    def choice(self, table: dict, key: str, path: tuple, choices: Iterable[str], default: Any = _MISSING,
               what: str = "") -> Any:
        """A string from a fixed set (or a catalog table), with did-you-mean."""
        if key not in table:
            return None if default is _MISSING else default
        v = self.string(table, key, path, default)
        if not isinstance(table[key], str):
            return v
        return self.name_in(v, path + (key,), choices, what) or (None if default is _MISSING else default)

    def size(self, table: dict, key: str, path: tuple, example: str) -> int | None:
        """A byte count: an integer or a string like "8GiB" (None, with a diagnostic, when it is neither)."""
        if key not in table:
            return None
        n = parse_bytes(table[key])
        if n is None:
            self.error(path + (key,), f"{format_path(path + (key,))} must be a size like {example}, got "
                       f"{show(table[key])}", kind="type", got=table[key])
        return n

    def name_in(self, v: str, p: tuple, choices: Iterable[str], what: str = "") -> str | None:
        choices = tuple(choices)
        if v in choices:
            return v
        hint = did_you_mean(v, choices) or f"known: {', '.join(choices)}"
        self.error(p, f"unknown {what or format_path(p)} {v!r}", hint, kind="unknown-name", got=v)
        return None


def _range_text(lo, hi) -> str:
    if hi >= MAX_COUNT * 1000:
        return f">= {lo}"
    return f"between {lo} and {hi}"


def _interval(lo, hi, lo_open, hi_open) -> str:
    return f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"


_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30, "t": 2 ** 40,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def parse_bytes(v: Any) -> int | None:
    """'8GiB' -> 8589934592, '1.5GB' -> 1500000000, 4096 -> 4096; None when it does not read as a size."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v > 0 else None
    if not isinstance(v, str):
        return None
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", v)
    if not m or m.group(2).lower() not in _UNITS:
        return None
    f = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(f):
        return None
    n = int(f)
    return n if n > 0 else None

