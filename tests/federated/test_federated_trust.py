"""Trust reconciliation (pool/trust.py's POOLSAFE rule): beyond own pools a federation ships only data. Every
task a consortium or open federation submits pickles with plain pickle to package functions and arrays (no
cloudpickle, no catalog module by value); the strategy travels as {aggregation, hash, params} and the peer
checks the hash against its own catalog entry; a user-written strategy or a callable loader runs only on an
own pool and is refused otherwise in the one diagnostic format."""
from __future__ import annotations

import pickle
import pickletools
from pathlib import Path

import blake3
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.catalog.aggregations import Strategy
from scellis_jupyter.federated import Federation, Privacy
from scellis_jupyter.federated import site as site_mod
from scellis_jupyter.pool import Pool

from test_privacy import SPEC, data3

ROOT = Path(__file__).resolve().parents[2]
DP = Privacy(epsilon=50.0, delta=1e-5, clip=1.0, noise_multiplier=1.0)
ALLOWED = ("scellis_jupyter.", "numpy", "builtins", "collections", "copyreg", "_codecs", "distributed.")


@pytest.fixture(scope="module")
def pool():
    with Pool() as p:
        yield p


def _globals(obj) -> set[str]:
    """Every module.name a plain pickle of `obj` refers to (what the receiver would import)."""
    out, strings = set(), []
    for op, arg, _ in pickletools.genops(pickle.dumps(obj, protocol=5)):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            out.add(f"{strings[-2]}.{strings[-1]}")
        elif op.name == "GLOBAL":
            out.add(arg.replace(" ", "."))
    return out


def _spy(pool, monkeypatch) -> list:
    sent = []
    orig = pool.client.submit

    def submit(fn, *args, **kw):
        sent.append((fn, args, {k: v for k, v in kw.items() if k not in ("workers", "key", "pure",
                                                                         "allow_other_workers")}))
        return orig(fn, *args, **kw)
    monkeypatch.setattr(pool.client, "submit", submit)
    return sent


@pytest.mark.parametrize("trust", ["consortium", "open"])
def test_beyond_own_only_data_travels_and_the_strategy_by_name_and_hash(pool, monkeypatch, trust):
    sent = _spy(pool, monkeypatch)
    f = Federation(pool, SPEC, data3(), strategy="fedprox", params={"mu": 0.1, "lr": 0.05}, trust=trust,
                   privacy=DP, batch_size="full", local_steps=2)
    w0 = dict(f.weights)
    f.fit(1)
    assert any(np.any(f.weights[k] != w0[k]) for k in w0)             # a round ran end to end
    src = (ROOT / "catalog/aggregations/fedprox.py").read_bytes()      # the hash, computed independently
    want = {"aggregation": "fedprox", "hash": blake3.blake3(b"aggregation\0fedprox\0" + src).hexdigest(),
            "params": {"mu": 0.1, "lr": 0.05}}
    rounds = [a for fn, a, _ in sent if fn is site_mod.round_update]
    assert len(rounds) == 3 and all(want in a for a in rounds)
    assert len(sent) > 6
    for fn, args, kw in sent:
        assert fn.__module__.startswith("scellis_jupyter.") and "<locals>" not in fn.__qualname__, fn
        pickle.dumps(fn)                                                 # by reference: a package function
        refs = _globals((args, kw))
        bad = {g for g in refs if not g.startswith(ALLOWED) or "cloudpickle" in g or "scellis_catalog" in g}
        assert not bad, (fn.__name__, bad)
        assert not any(isinstance(a, bytes) for a in args), fn.__name__  # no pickled code among the arguments


def test_own_ships_a_user_strategy_and_beyond_own_refuses_it(pool):
    class Half(Strategy):
        def aggregate(self, weights, total, count, state):
            return {k: weights[k] + 0.5 * total["delta"][k] / total["weight"] for k in weights}, state
    f = Federation(pool, SPEC, data3(), strategy=Half(), batch_size="full", local_steps=1)
    assert isinstance(f._shipped, bytes) and f.fit(1)[0].sites == ["s0", "s1", "s2"]
    for trust in ("consortium", "open"):
        with pytest.raises(sc.TrustRefused) as e:
            Federation(pool, SPEC, data3(), strategy=Half(), trust=trust, privacy=DP)
        d = e.value.diagnostic
        assert d.code == "trust-refused" and "only an own pool may ship Python objects" in d.message
        assert d.where == f"Federation(trust={trust!r}, strategy=...)" and str(e.value).startswith("error[trust-refused]")
    catalog.load_source('''
from scellis_jupyter.catalog import aggregation
from scellis_jupyter.catalog.aggregations import Strategy

@aggregation("cell_mean")
class CellMean(Strategy):
    weighting = "uniform"
''', "trust_cell")
    try:
        assert Federation(pool, SPEC, data3(), strategy="cell_mean", batch_size="full", local_steps=1).fit(1)
        with pytest.raises(sc.TrustRefused, match="comes from <cell:trust_cell>, not a catalog file"):
            Federation(pool, SPEC, data3(), strategy="cell_mean", trust="consortium", privacy=DP)
    finally:
        catalog.unregister("aggregation", "cell_mean")


def test_the_peer_checks_the_hash_and_its_own_catalog(pool):
    f = Federation(pool, SPEC, data3(), strategy="fedavg", trust="consortium", privacy=DP, batch_size="full",
                   local_steps=1)
    f._shipped = dict(f._shipped, hash="0" * 64)                       # the peer's entry differs from this
    with pytest.raises(sc.FederatedError, match=r"site 's\d': aggregation 'fedavg' in this site's catalog has "
                                                r"content hash [0-9a-f]{16}, the federation's has 0{16}") as e:
        f.fit(1)
    assert e.value.diagnostic.code == "federated-strategy" and f.version == 0 and f.ledger.entries == []
    with pytest.raises(sc.FederatedError, match="this site's catalog has no aggregation 'fedfoo'"):
        site_mod._strategy({"aggregation": "fedfoo", "hash": "0" * 64, "params": {}})


def test_beyond_own_a_callable_loader_is_refused(pool):
    x, y = data3()["s0"]
    with pytest.raises(sc.TrustRefused, match="site 'a''s loader .*<lambda> is one") as e:
        Federation(pool, SPEC, {"a": lambda: (x, y), "b": (x, y)}, trust="open", privacy=DP)
    assert e.value.diagnostic.where == "Federation(trust='open', sites=...)"
