"""Three trust regimes, never collapsed: what a Pool of each regime refuses before anything is sent.

Why refusals and not warnings: `own` is your devices (Python callables may travel, verification is your
choice); `consortium` is partner labs (TLS with certificates through Dask's `Security`, verification on,
shards only as data); `open` is strangers (verification mandatory, shards only as data, and no job that is
safety-critical, no input that is not public, no model or dataset that is confidential). A Job declares
what it is (`safety_critical`, `classification` of its data and model); an undeclared class counts as not
public on an open pool: the default is to keep data home.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import TrustRefused
from .datashard import DataProgram

REGIMES = ("own", "consortium", "open")
CLASSES = ("public", "internal", "confidential")


def a_regime(trust: str) -> str:
    """'an open', 'a consortium', 'an own': the regime with its article, as a message names it."""
    return f"{'an' if trust[:1] in 'aeiou' else 'a'} {trust}"


def check_regime(trust: str) -> str:
    if trust not in REGIMES:
        raise TrustRefused(f"unknown trust regime {trust!r}", where="Pool",
                           hint="trust='own' (your devices), 'consortium' (partner labs, TLS) or 'open' (strangers)")
    return trust


def check_security(trust: str, security: Any, address: str | None) -> None:
    """A consortium pool speaks TLS with certificates, or not at all."""
    if trust != "consortium":
        return
    if security is None or not getattr(security, "require_encryption", False) or not security.tls_ca_file:
        raise TrustRefused("a consortium pool needs TLS with certificates", where="Pool(trust='consortium')",
                           hint="pass security=distributed.Security(tls_ca_file=..., tls_client_cert=..., "
                                "tls_client_key=..., require_encryption=True) with the consortium's CA")
    if address is not None and not address.startswith("tls://"):
        raise TrustRefused(f"a consortium pool joins by tls://, not {address.split('://')[0]}://",
                           where="Pool(trust='consortium')", hint="give the scheduler's tls:// address")


def classes_of(job) -> dict[str, str | None]:
    """{input name or "model": declared class, None where undeclared}."""
    c = job.classification
    names = list(job.inputs) or ["inputs"]
    if isinstance(c, dict):
        out = {str(k): c.get(k) for k in names}
        out["model"] = c.get("model")
        for k in c:
            if k not in out:
                raise TrustRefused(f"classification names {k!r}, which is not an input of the job",
                                   where=_where(job), hint=f"inputs are {sorted(map(str, job.inputs))}; or 'model'")
        return out
    return {**{str(k): c for k in names}, "model": c}


def _where(job) -> str:
    return f"Job {job.name or job.hash[:12]}"


def admit(job, trust: str) -> None:
    """Refuse, in the one diagnostic format, a Job this regime does not allow; before anything is sent."""
    classes = classes_of(job)
    for k, v in classes.items():
        if v is not None and v not in CLASSES:
            raise TrustRefused(f"{k!r} is classified {v!r}", where=_where(job), hint=f"classes are {', '.join(CLASSES)}")
    if trust == "own":
        return
    where = f"{_where(job)} on {a_regime(trust)} pool"
    if job.verify == "none":
        raise TrustRefused(f"{a_regime(trust)} pool verifies every job; this one declares verify='none'", where=where,
                           hint="declare verify='reference', 'spot', 'quorum' or 'freivalds'")
    if job.verify == "spot" and job.fraction <= 0.0:
        raise TrustRefused(f"a spot-check fraction of {job.fraction} checks nothing", where=where,
                           hint="give fraction > 0 (and canaries=)")
    if not isinstance(job.fn, DataProgram):
        raise TrustRefused(f"only an own pool may ship Python callables; {_name(job.fn)} is one", where=where,
                           hint="express the shard as a DataProgram (a Program IR that travels as data and runs "
                                "on the peer's own interpreter), or use an own pool")
    if job.reference is not None and not callable(job.reference):
        raise TrustRefused("the job's reference is not callable", where=where, hint="give a function or none")
    _plain(job.params, "params", where)
    if trust == "open":
        if job.safety_critical:
            raise TrustRefused("a safety-critical job does not run on an open pool", where=where,
                               hint="run it on an own or consortium pool")
        for k, v in classes.items():
            if k == "model":
                continue
            if v == "confidential":
                raise TrustRefused(f"input {k!r} is a confidential dataset", where=where,
                                   hint="an open pool gets only public data; use an own or consortium pool")
            if v != "public":
                said = "undeclared" if v is None else f"classified {v!r}"
                raise TrustRefused(f"input {k!r} is {said}: an open pool gets only public data", where=where,
                                   hint="declare classification='public' if it is; otherwise use an own or "
                                        "consortium pool")
        if classes["model"] == "confidential":
            raise TrustRefused("the job's model is confidential", where=where,
                               hint="an open pool gets only what may be public; use an own or consortium pool")
        if classes["model"] is None:
            raise TrustRefused("the job's model is undeclared: an open pool gets no confidential model",
                               where=where, hint="declare classification={'model': 'public'|'internal', ...}")


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _plain(v: Any, path: str, where: str) -> None:
    """Params go into the traced program on the client; a callable among them is refused by name."""
    if v is None or isinstance(v, (bool, int, float, str, np.ndarray, np.generic)):
        return
    if isinstance(v, dict):
        for k, x in v.items():
            _plain(x, f"{path}.{k}", where)
        return
    if isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _plain(x, f"{path}[{i}]", where)
        return
    raise TrustRefused(f"{path} is a {type(v).__name__}: only an own pool may be sent objects or code",
                       where=where, hint="give numbers, strings and arrays")
