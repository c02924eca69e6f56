"""Initializers: torch's gain table, shared checks for entries, and the initializer conformance checks.

Why every entry draws from a Philox `Stream` (never numpy's RNG): the stream is keyed by (seed, "init")
and countered by position, so the same seed gives the same weights bit for bit on every machine, and a
checkpoint's stream positions say exactly where initialization stopped.

An initializer entry is a class with `random = True/False` (whether it draws from the stream) and
`__call__(shape, fan_in, fan_out, stream, name="") -> float32 array`. An entry that needs outside input
for the checks (pretrained: a file) may define `check_hyper(shape, folder) -> dict` of hyperparameters.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import did_you_mean
from .registry import CatalogError, Param

__all__ = ["gain", "NONLINEARITIES", "fan", "finish", "Kaiming", "KAIMING_PARAMS", "Xavier", "XAVIER_PARAMS"]

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


# (shape, fan_in, fan_out) as layers declare them: linear (out, in), conv (out, c, kh, kw), bias / norm (d,)


