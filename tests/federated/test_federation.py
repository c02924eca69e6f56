"""A federation end to end on digits, and its refusals of bad input, each as one diagnostic."""
from __future__ import annotations

import time

import numpy as np
import pytest
from sklearn.datasets import load_digits

import scellis_jupyter as sc
from scellis_jupyter.federated import Federation, Privacy
from scellis_jupyter.federated.splits import iid_split, label_skew_split
from scellis_jupyter.pool import Pool
from scellis_jupyter.run.run import Run

SPEC = """
name = "fed-digits"
[model]
nodes = [
  { op = "linear", out = 32 },
  { op = "relu" },
  { name = "logits", op = "linear", out = 10 },
]
[recipe]
loss = "cross_entropy"
optimizer = { name = "sgd", lr = 0.1 }
batch_size = 32
determinism = "debug"
seed = 0
"""


@pytest.fixture(scope="module")
def digits():
    x, y = load_digits(return_X_y=True)
    x, y = (x / 16).astype(np.float32), y.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(x))
    te, tr = perm[:360], perm[360:]
    return x[tr], y[tr], x[te], y[te]


@pytest.fixture(scope="module")
def pool():
    with Pool() as p:
        yield p


def test_fedavg_on_an_iid_split_reaches_95_percent_of_central(pool, digits):
    x, y, xt, yt = digits
    rounds, steps = 10, 20
    central = Run(SPEC.replace('name = "fed-digits"', 'name = "central"\n[data]\nsplit = { train = 1.0 }'),
                  device="reference", steps=rounds * steps, data={"train": (x, y)})
    central.run_to_end()
    acc_central = float(np.mean(np.asarray(central.predict(xt)).argmax(1) == yt))
    parts = iid_split(len(x), 3, seed=1)
    fed = Federation(pool, SPEC, {f"site{i}": (x[p], y[p]) for i, p in enumerate(parts)}, local_steps=steps)
    seen = []
    fed.fit(rounds, on_round=seen.append)
    acc_fed = fed.accuracy(xt, yt)
    print(f"central {acc_central:.4f}  fedavg {acc_fed:.4f}")
    assert acc_central > 0.9                                   # the baseline itself learned
    assert acc_fed >= 0.95 * acc_central
    assert [r.round for r in seen] == list(range(1, rounds + 1)) and fed.version == rounds
    assert all(r.sites == ["site0", "site1", "site2"] and not r.dropped for r in seen)


def test_label_skew_split_is_skewed_and_complete(digits):
    _, y, _, _ = digits
    parts = label_skew_split(y, 3, alpha=0.1, seed=0)
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(y)))
    share = np.array([[np.sum(y[p] == c) / np.sum(y == c) for c in range(10)] for p in parts])   # of class c, on p
    assert share.max(axis=0).mean() > 0.8                      # most classes live mostly on one site


# ---- bad input ------------------------------------------------------------------------------------------
def test_a_site_with_zero_examples(pool):
    with pytest.raises(sc.FederatedError) as e:
        Federation(pool, SPEC, {"a": (np.zeros((5, 64), np.float32), np.zeros(5, np.int64)),
                                "empty": (np.zeros((0, 64), np.float32), np.zeros(0, np.int64))})
    d = e.value.diagnostic
    assert d.code == "federated-empty-site" and "'empty' holds no examples" in d.message and d.hint


def test_a_site_that_never_answers_fails_the_round_clearly_or_is_passed_by_the_quorum(monkeypatch, digits):
    from scellis_jupyter.federated import site as site_mod
    x, y, _, _ = digits
    real = site_mod.round_update

    def silent(key, site, *a, **kw):
        if site == "mute":
            time.sleep(3.0)
        return real(key, site, *a, **kw)
    monkeypatch.setattr(site_mod, "round_update", silent)
    sites = {"a": (x[:200], y[:200]), "b": (x[200:400], y[200:400]), "mute": (x[400:600], y[400:600])}
    with Pool(workers=3, processes=False) as pool:
        strict = Federation(pool, SPEC, sites, local_steps=2, timeout=1.0)
        t = time.monotonic()
        with pytest.raises(sc.SiteUnavailable) as e:
            strict.fit(1)
        assert time.monotonic() - t < 2.9                   # it did not wait for the silent site
        d = e.value.diagnostic
        assert d.code == "federated-quorum" and "2 of 3 sites answered" in d.message and "mute" in d.message
        assert strict.version == 0
        lenient = Federation(pool, SPEC, sites, local_steps=2, timeout=1.0, quorum=2)
        r = lenient.fit(1)[0]
        assert r.sites == ["a", "b"] and r.dropped == ["mute"] and lenient.version == 1


def test_an_eps_budget_already_spent(pool, tmp_path, digits):
    from scellis_jupyter.federated import PrivacyLedger
    x, y, _, _ = digits
    led = PrivacyLedger(1.0, 1e-5, tmp_path / "eps.jsonl")
    led.entries.append({"what": "an earlier study", "noise_multiplier": 0.8, "epsilon": 99.0, "delta": 1e-5})
    f = Federation(pool, SPEC, {"a": (x[:100], y[:100])}, privacy=Privacy(1.0, 1e-5, noise_multiplier=3.0),
                   privacy_ledger=led, local_steps=1)
    with pytest.raises(sc.PrivacyBudgetExceeded) as e:
        f.fit(1)
    assert e.value.diagnostic.code == "privacy-budget" and "already spent in 1 round" in str(e.value)
    assert f.version == 0


def test_mismatched_model_versions_between_sites(pool, digits):
    from scellis_jupyter.federated import site as site_mod
    x, y, _, _ = digits
    f = Federation(pool, SPEC, {"a": (x[:100], y[:100]), "b": (x[100:200], y[100:200])}, local_steps=1)
    real = site_mod.round_update

    def stale(key, site, spec, weights, version, *a, **kw):       # b answers from an older model version
        out = real(key, site, spec, weights, version, *a, **kw)
        if site == "b":
            out["version"] = version - 1
        return out
    site_mod.round_update = stale
    try:
        with pytest.raises(sc.ModelVersionMismatch) as e:
            f.fit(1)
    finally:
        site_mod.round_update = real
    d = e.value.diagnostic
    assert d.code == "federated-version" and "site 'b'" in d.message and "version -1" in d.message
    assert f.version == 0


def test_a_strategy_that_is_not_one_and_an_unknown_trust(pool, digits):
    x, y, _, _ = digits
    with pytest.raises(sc.FederatedError, match="has no aggregate"):
        class Half:
            def init(self, w, n): return {}
            def local(self, *a): return None
            def contribution(self, *a): return {}, {}
        Federation(pool, SPEC, {"a": (x[:50], y[:50])}, strategy=Half())
    with pytest.raises(sc.FederatedError, match="unknown trust regime 'friends'"):
        Federation(pool, SPEC, {"a": (x[:50], y[:50])}, trust="friends")
    with pytest.raises(sc.CatalogError, match="no aggregation named 'fedavgg'"):
        Federation(pool, SPEC, {"a": (x[:50], y[:50])}, strategy="fedavgg")


def test_accepted_site_updates_mint_receipts_in_the_pools_ledger(tmp_path, digits):
    from scellis_jupyter.plan import plan
    from scellis_jupyter.program.cost import program_flops
    x, y, _, _ = digits
    with Pool(ledger=tmp_path / "receipts.sqlite") as pool:
        f = Federation(pool, SPEC, {"a": (x[:100], y[:100]), "b": (x[100:250], y[100:250])}, local_steps=3)
        f.fit(2)
        rep = pool.ledger.verify()
        rec = pool.ledger.receipts()
    assert rep["receipts"] == 4 and len({r.job for r in rec}) == 2
    assert {r.method for r in rec} == {"federated:clear:unverified"}
    # work units: the planner's FLOPs of one local step (batch 32, digits rows) times 3 steps
    spec = sc.Spec.of(SPEC.replace('name = "fed-digits"', 'name = "x"\n[data]\nsplit = { train = 1.0 }'),
                      {"train": (x[:32], y[:32])})
    assert all(r.work_units == 3 * program_flops(plan(spec, device="reference").step.program) for r in rec)


def test_a_site_smaller_than_one_batch_is_named(pool, digits):
    x, y, _, _ = digits
    f = Federation(pool, SPEC, {"big": (x[:100], y[:100]), "tiny": (x[100:105], y[100:105])}, local_steps=1)
    with pytest.raises(sc.FederatedError) as e:
        f.fit(1)
    d = e.value.diagnostic
    assert d.message.startswith("site 'tiny': the train split has 5 examples, fewer than one batch of 32")
    assert d.where.startswith("site 'tiny'") and d.hint == "lower batch_size" and d.code == "run"
