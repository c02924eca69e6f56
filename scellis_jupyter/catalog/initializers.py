"""Initializers: torch's gain table, shared checks for entries, and the initializer conformance checks.

Why every entry draws from a Philox `Stream` (never numpy's RNG): the stream is keyed by (seed, "init")
and countered by position, so the same seed gives the same weights bit for bit on every machine, and a
checkpoint's stream positions say exactly where initialization stopped.

An initializer entry is a class with `random = True/False` (whether it draws from the stream) and
`__call__(shape, fan_in, fan_out, stream, name="") -> float32 array`. An entry that needs outside input
for the checks (pretrained: a file) may define `check_hyper(shape, folder) -> dict` of hyperparameters.
"""
from __future__ import annotations

import builtins
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ScellisError, did_you_mean
from .registry import CatalogError, Entry, Param, checker

__all__ = ["gain", "NONLINEARITIES", "fan", "finish", "Kaiming", "KAIMING_PARAMS", "Xavier", "XAVIER_PARAMS",
           "check_initializer"]

NONLINEARITIES = ("linear", "identity", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d", "sigmoid", "tanh", "relu", "leaky_relu", "selu")
_GAIN_ONE = NONLINEARITIES[:9]


def gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity, as torch.nn.init.calculate_gain defines it.

    linear/conv/sigmoid 1, tanh 5/3, relu sqrt(2), leaky_relu sqrt(2 / (1 + slope^2)) (slope `param`,
    default 0.01), selu 3/4.
    """
    if not isinstance(nonlinearity, str):
        raise CatalogError(f"nonlinearity {nonlinearity!r} is not a name", where="initializer gain")
    if nonlinearity in _GAIN_ONE:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise CatalogError(f"negative slope {slope!r} is not a number", where="initializer gain")
        return math.sqrt(2.0 / (1.0 + float(slope) ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4.0
    raise CatalogError(f"unknown nonlinearity {nonlinearity!r}", where="initializer gain",
                       hint=did_you_mean(nonlinearity, NONLINEARITIES) or f"use one of {', '.join(NONLINEARITIES)}")


def fan(entry: str, shape: tuple, fan_in: int, fan_out: int, mode: str = "fan_in") -> int:
    """fan_in or fan_out (per `mode`), or a CatalogError when it is not positive."""
    if mode not in ("fan_in", "fan_out"):
        raise CatalogError(f"mode {mode!r} is not fan_in or fan_out", where=f"initializer {entry}",
                           hint=did_you_mean(str(mode), ("fan_in", "fan_out")))
    n = fan_in if mode == "fan_in" else fan_out
    if not isinstance(n, (int, np.integer)) or n <= 0:
        raise CatalogError(f"{mode} is {n!r} for a parameter of shape {tuple(shape)}", where=f"initializer {entry}",
                           hint="variance-scaling initializers need fan_in and fan_out > 0")
    return int(n)


def finish(x: np.ndarray, shape: tuple) -> np.ndarray:
    """float32, C-contiguous, exactly `shape` (what init_params stores)."""
    return np.ascontiguousarray(np.asarray(x, np.float64).astype(np.float32).reshape(tuple(shape)))


# ---- variance-scaling families: the normal and uniform entries differ only in `law` ---------------------
def _scaled(stream, shape: tuple, law: str, std: float, bound: float) -> np.ndarray:
    """N(0, std^2) or U(-bound, bound) (bound = sqrt(3) std, the same variance), as finish() stores it."""
    if law == "normal":
        return finish(stream.normal(tuple(shape)).astype(np.float64) * std, shape)
    u = stream.uniform(tuple(shape)).astype(np.float64)
    return finish((2.0 * u - 1.0) * bound, shape)


KAIMING_PARAMS = {
    "a": Param(float, 0.0, doc="negative slope of leaky_relu (ignored for other nonlinearities)"),
    "mode": Param(str, "fan_in", choices=("fan_in", "fan_out"), doc="which fan keeps its variance"),
    "nonlinearity": Param(str, "leaky_relu", choices=NONLINEARITIES, doc="picks the gain"),
}


class Kaiming:
    """Kaiming/He (He et al. 2015): std = gain(nonlinearity, a) / sqrt(fan), drawn per `law`.

    Why a nonlinearity: ReLU-like layers halve the variance, so the gain (torch's table; `a` is
    leaky_relu's negative slope) restores it; mode picks whether forward activations (fan_in) or backward
    gradients (fan_out) keep their variance. Defaults are torch.nn.init.kaiming_*_'s."""

    random = True
    name, law = "kaiming_normal", "normal"

    def __init__(self, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
        self.a, self.mode, self.nonlinearity = a, mode, nonlinearity

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        std = gain(self.nonlinearity, self.a) / math.sqrt(fan(self.name, shape, fan_in, fan_out, self.mode))
        return _scaled(stream, shape, self.law, std, math.sqrt(3.0) * std)


XAVIER_PARAMS = {"gain": Param(float, 1.0, lo=0.0, doc="scale, e.g. initializers.gain('tanh')")}


class Xavier:
    """Xavier/Glorot (Glorot & Bengio 2010): variance gain^2 * 2 / (fan_in + fan_out), drawn per `law`.

    Why both fans: it keeps the variance of activations (fan_in) and of gradients (fan_out) roughly
    constant for linear/tanh-like layers (torch.nn.init.xavier_*_ with the same gain)."""

    random = True
    name, law = "xavier_normal", "normal"

    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape: tuple, fan_in: int, fan_out: int, stream, name: str = "") -> np.ndarray:
        n = fan(self.name, shape, fan_in, fan_out) + fan(self.name, shape, fan_in, fan_out, "fan_out")
        return _scaled(stream, shape, self.law, self.gain * math.sqrt(2.0 / n), self.gain * math.sqrt(6.0 / n))


# ---- conformance ---------------------------------------------------------------------------------------
# (shape, fan_in, fan_out) as layers declare them: linear (out, in), conv (out, c, kh, kw), bias / norm (d,)
_REQUIRED = ((5, 3), 3, 5)
_OPTIONAL = (((3, 8), 8, 3), ((4, 2, 3, 3), 18, 36), ((7,), 7, 7), ((64, 48), 48, 64))


def _draw(init: Any, case: tuple, seed: int) -> tuple[np.ndarray, int]:
    from ..rng import Generator
    g = Generator(seed)
    s = g.stream("init")
    out = init(case[0], case[1], case[2], s, name="check.weight")
    return out, s.position


def _hyper(entry: Entry, shape: tuple, folder: Path) -> dict:
    hook = getattr(entry.obj, "check_hyper", None)
    return dict(hook(tuple(shape), folder)) if callable(hook) else {}


@checker("initializer")
def check_initializer(entry: Entry) -> builtins.list[str]:
    """Shape and dtype, finite, same stream state -> same array, seed dependence matching `random`."""
    try:
        entry.make()
    except Exception as e:
        return [f"instantiate: make() with default hyperparameters raised {type(e).__name__}: {e}"]
    rand = getattr(entry.obj, "random", None)
    if not isinstance(rand, bool):
        return ["interface: declare random = True (draws from the stream) or False"]
    failed: builtins.list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in (_REQUIRED,) + _OPTIONAL:
            shape, at = case[0], f" (shape {case[0]})"
            try:
                init = entry.make(**_hyper(entry, shape, Path(tmp)))
                if not callable(init):
                    return ["interface: the instance is not callable as init(shape, fan_in, fan_out, stream, name)"]
                a, pos_a = _draw(init, case, 0)
            except ScellisError:
                if case is _REQUIRED:
                    failed.append(f"runs: refused a 2-D weight{at}")
                continue                      # an entry may decline a shape it does not support, clearly
            except Exception as e:
                failed.append(f"runs: raised {type(e).__name__}: {e}{at}")
                continue
            if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != tuple(shape):
                got = f"{a.shape}:{a.dtype}" if isinstance(a, np.ndarray) else type(a).__name__
                failed.append(f"shape-dtype: returned {got}, expected {tuple(shape)}:float32{at}")
                continue
            if not np.all(np.isfinite(a)):
                failed.append(f"finite: non-finite values{at}")
            b, pos_b = _draw(init, case, 0)
            if not (np.array_equal(a.view(np.uint32), b.view(np.uint32)) and pos_a == pos_b):
                failed.append(f"deterministic: the same seed gave different arrays or stream positions{at}")
            c, _ = _draw(init, case, 1)
            if rand:
                if pos_a == 0:
                    failed.append(f"stream-advanced: random = True but the stream did not advance{at}")
                if np.array_equal(a, c) and a.size > 1:
                    failed.append(f"seed-dependent: seeds 0 and 1 gave the same array{at}")
            else:
                if pos_a != 0:
                    failed.append(f"stream-untouched: random = False but the stream advanced by {pos_a}{at}")
                if not np.array_equal(a, c):
                    failed.append(f"seed-independent: random = False but seeds 0 and 1 differ{at}")
    return failed
