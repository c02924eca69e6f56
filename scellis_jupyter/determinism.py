"""Determinism tiers: debug | prod | fast, named per program, recorded with every result.

debug: bit-identical across reruns on one device and on the reference path (fixed reduction order,
no atomics). prod: deterministic on one device; across devices within a declared tolerance. fast:
anything within tolerance (e.g. atomics, reduced-precision accumulation where a kernel offers it).
"""
from __future__ import annotations

import contextlib

from .errors import TierError, did_you_mean, notice

TIERS = ("debug", "prod", "fast")
# declared cross-device relative tolerance per tier (f32), what `verify` style checks compare against
TOLERANCE = {"debug": 0.0, "prod": 1e-5, "fast": 1e-3}


def trajectory_tolerance(tier: str, steps: int, cross_device: bool = False) -> float:
    """The relative tolerance after `steps` training steps: the tier's per-step tolerance times the steps.

    Why it grows: each step's rounding differences (another device, another reduction order) feed the
    next step, so a training trajectory drifts roughly linearly in its step count while it stays stable
    (measured for the digits MLP, wgpu/llvmpipe against the reference path: about 1e-6 per step over
    30 steps). Across devices the tier is at least prod; debug on one device stays 0 (bit for bit).
    """
    tol = TOLERANCE[check(tier)]
    if cross_device:
        tol = max(tol, TOLERANCE["prod"])
    return tol * max(1, int(steps))
DEFAULT = "debug"
_state = {"tier": None, "told": False}


def check(tier: str) -> str:
    if tier not in TIERS:
        raise TierError(f"unknown determinism tier {tier!r}", hint=did_you_mean(str(tier), TIERS)
                        or f"use one of {', '.join(TIERS)}")
    return tier


def set_tier(tier: str | None) -> None:
    """Set the process-wide tier for programs that do not name one (None: back to unnamed)."""
    _state["tier"] = check(tier) if tier is not None else None


@contextlib.contextmanager
def tier(name: str):
    old = _state["tier"]
    _state["tier"] = check(name)
    try:
        yield
    finally:
        _state["tier"] = old


def resolve(tier: str | None) -> tuple[str, str]:
    """(tier, why): the named tier, else the process tier, else the default, said once to the user."""
    if tier is not None:
        return check(tier), "named"
    if _state["tier"] is not None:
        return _state["tier"], "set_tier"
    if not _state["told"]:
        _state["told"] = True
        notice(f"scellis: no determinism tier named; using '{DEFAULT}' (bit-identical reruns on one device). "
               "Name one in the spec ([recipe] determinism = \"prod\"; or \"debug\", \"fast\"), with --tier on "
               "train, or for the whole process with sc.set_tier(\"prod\").")
    return DEFAULT, "default"
