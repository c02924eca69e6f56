"""Initial weights for a model graph: each declared parameter drawn with its catalog initializer.

Why one stream in declaration order: `generator.stream("init")` is walked parameter by parameter in the
order `graph.params` lists them, so the same spec and seed give the same weights bit for bit on every
machine, and the generator's position afterwards records exactly how far initialization went.
`overrides` changes the initializer of chosen parameters (exact name or glob) without touching the spec.
"""
from __future__ import annotations

import fnmatch
from typing import Any, Mapping

import numpy as np

from ..catalog import CatalogError, get, make
from ..errors import did_you_mean
from ..rng import Generator

__all__ = ["init_params"]


def _parse_override(key: str, value: Any) -> tuple[str, dict]:
    if isinstance(value, str):
        return value, {}
    if isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], str) \
            and isinstance(value[1], Mapping):
        return value[0], dict(value[1])
    raise CatalogError(f"override {key!r} = {value!r} is not an initializer name or (name, hyperparams)",
                       where="init_params", hint='e.g. {"head.weight": ("normal", {"std": 0.02})}')


def _choose(name: str, rules: dict[str, tuple[str, dict]]) -> tuple[str, dict] | None:
    if name in rules:
        return rules[name]
    for pattern, rule in rules.items():          # first matching glob, in the order given
        if fnmatch.fnmatchcase(name, pattern):
            return rule
    return None


def init_params(graph: Any, generator: Generator | int, overrides: Mapping[str, Any] | None = None
                ) -> dict[str, np.ndarray]:
    """{param name: float32 array} for every `ParamDecl` of `graph.params`, in order.

    Each is drawn by the initializer `decl.init` names (or the override that matches it) from
    `generator.stream("init")`; `generator` may be a seed. An override that matches no parameter is an
    error (a typo would otherwise silently keep the default).
    """
    gen = Generator(generator) if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool) \
        else generator
    if not isinstance(gen, Generator):
        raise CatalogError(f"generator must be a scellis Generator or a seed, got {type(generator).__name__}",
                           where="init_params", hint="sc.rng.Generator(seed)")
    rules = {k: _parse_override(k, v) for k, v in (overrides or {}).items()}
    names = [d.name for d in graph.params]
    unused = [k for k in rules if k not in names and not any(fnmatch.fnmatchcase(n, k) for n in names)]
    if unused:
        raise CatalogError(f"override {unused[0]!r} matches no parameter", where="init_params",
                           hint=did_you_mean(unused[0], names) or f"parameters: {', '.join(names[:8])}"
                                                                 + (" ..." if len(names) > 8 else ""))
    stream = gen.stream("init")
    made: dict[tuple, Any] = {}
    out: dict[str, np.ndarray] = {}
    for d in graph.params:
        init_name, hyper = _choose(d.name, rules) or (d.init, {})
        key = (init_name, tuple(sorted((k, repr(v)) for k, v in hyper.items())))
        if key not in made:
            try:
                get("initializer", init_name)
                made[key] = make("initializer", init_name, **hyper)
            except CatalogError as e:
                raise CatalogError(f"parameter {d.name!r}: {e.diagnostic.message}", where="init_params",
                                   hint=e.diagnostic.hint) from e
        a = made[key](tuple(d.shape), d.fan_in, d.fan_out, stream, name=d.name)
        if not isinstance(a, np.ndarray) or a.shape != tuple(d.shape) or a.dtype != np.float32:
            got = f"{a.shape}:{a.dtype}" if isinstance(a, np.ndarray) else type(a).__name__
            raise CatalogError(f"initializer {init_name!r} returned {got} for {d.name!r}, which needs "
                               f"{tuple(d.shape)}:float32", where="init_params",
                               hint="an initializer returns a float32 array of exactly the shape asked")
        out[d.name] = a
    return out
