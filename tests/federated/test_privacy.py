"""Differential privacy: clipping, the noise's calibration, dp-accounting's epsilon, a ledger that only grows
and refuses overspending, and the refusals of a federation beyond `own` without DP."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import special, stats

import scellis_jupyter as sc
from scellis_jupyter.federated import Federation, Privacy, PrivacyLedger
from scellis_jupyter.federated.privacy import clip, epsilon_of, gaussian_noise
from scellis_jupyter.pool import Pool

from fixtures import spec_text

SPEC = spec_text("fed_linear", name="fed-dp")


def data3(n=8):
    rng = np.random.default_rng(3)
    return {f"s{i}": (rng.standard_normal((n, 3)).astype(np.float32), rng.standard_normal((n, 2)).astype(np.float32))
            for i in range(3)}


@pytest.fixture(scope="module")
def pool():
    with Pool() as p:
        yield p


def test_clip_bounds_the_norm_and_keeps_the_direction():
    v = np.array([3.0, 4.0])
    c, n = clip(v, 1.0)
    assert n == 5.0 and np.allclose(c, [0.6, 0.8])
    small, _ = clip(np.array([0.1, 0.0]), 1.0)
    assert np.array_equal(small, [0.1, 0.0])


def test_noise_has_the_calibrated_standard_deviation():
    z = gaussian_noise(200_000, 2.5)
    # the sample std of 2e5 normal draws is within 1% of sigma with overwhelming probability (~7 sd)
    assert abs(z.std() / 2.5 - 1) < 0.01 and abs(z.mean()) < 0.05
    assert stats.kstest(z / 2.5, "norm").pvalue > 1e-4
    assert not np.array_equal(gaussian_noise(8, 1.0), gaussian_noise(8, 1.0))    # never a fixed seed


def _gaussian_delta(eps: float, mu: float) -> float:
    """delta(eps) of the Gaussian mechanism with mu = sqrt(rounds)/z (Balle & Wang 2018, theorem 8)."""
    phi = lambda t: 0.5 * special.erfc(-t / math.sqrt(2))    # noqa: E731
    return phi(-eps / mu + mu / 2) - math.exp(eps) * phi(-eps / mu - mu / 2)


def test_rdp_epsilon_upper_bounds_the_exact_gaussian_curve():
    # k rounds of the Gaussian mechanism at noise z compose to one with mu = sqrt(k)/z; RDP's eps is an upper
    # bound of the exact (tight) eps at that delta, and not a loose one (within a factor 1.6 here)
    z, k, delta = 1.2, 10, 1e-5
    eps = epsilon_of([z] * k, delta)
    assert _gaussian_delta(eps, math.sqrt(k) / z) <= delta
    lo, hi = 0.0, eps
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _gaussian_delta(mid, math.sqrt(k) / z) <= delta else (mid, hi)
    assert eps / hi < 1.6


def test_the_ledger_only_grows_and_refuses_overspending(tmp_path):
    path = tmp_path / "budget.jsonl"
    led = PrivacyLedger(3.0, 1e-5, path)
    spent = []
    while True:
        try:
            led.charge(1.5)
        except sc.PrivacyBudgetExceeded as e:
            assert e.diagnostic.code == "privacy-budget" and "declared budget eps=3" in str(e)
            break
        spent.append(led.spent)
    assert len(spent) >= 1 and spent == sorted(spent) and spent[-1] <= 3.0
    assert len(led.entries) == len(spent)                        # the refused round was not recorded
    again = PrivacyLedger(3.0, 1e-5, path)                        # a new session: the budget stays spent
    assert again.spent == pytest.approx(spent[-1]) and len(again.entries) == len(spent)
    with pytest.raises(sc.PrivacyBudgetExceeded):
        again.charge(1.5)
    lines = path.read_text().splitlines()
    edited = tmp_path / "edited.jsonl"
    edited.write_text(lines[-1] + "\n" + lines[0] + "\n")
    with pytest.raises(sc.FederatedError, match="spends less|does not match|does not chain"):
        PrivacyLedger(3.0, 1e-5, edited)


def test_beyond_own_without_dp_is_refused_and_consortium_needs_secure_aggregation(pool):
    with pytest.raises(sc.FederatedError, match="consortium federation without differential privacy is refused"):
        Federation(pool, SPEC, data3(), trust="consortium")
    with pytest.raises(sc.FederatedError, match="an open federation without differential privacy"):
        Federation(pool, SPEC, data3(), trust="open")
    with pytest.raises(sc.FederatedError, match="without secure aggregation is refused"):
        Federation(pool, SPEC, data3(), trust="consortium", privacy=Privacy(4.0, 1e-5), secure=False)


def test_a_consortium_round_is_clipped_noised_masked_and_charged(pool):
    p = Privacy(epsilon=5.0, delta=1e-5, clip=0.5, noise_multiplier=2.0)
    f = Federation(pool, SPEC, data3(), trust="consortium", privacy=p, batch_size="full", local_steps=2)
    assert f.secure
    w0 = dict(f.weights)
    r = f.fit(1)[0]
    assert r.epsilon == pytest.approx(epsilon_of([2.0], 1e-5)) and f.ledger.spent == r.epsilon
    # the noise is on the sum of 3 clipped deltas: the step is (sum + N(0, (z C)^2)) / 3 per coordinate
    step = np.concatenate([(f.weights[k] - w0[k]).ravel() for k in sorted(w0)])
    assert np.linalg.norm(step) > 0
    while True:                                       # then the budget runs out, and a round is refused
        try:
            f.fit(1)
        except sc.PrivacyBudgetExceeded as e:
            assert f.ledger.spent <= 5.0 and len(f.rounds) >= 2 and "would spend" in str(e)
            break
    before = f.version
    with pytest.raises(sc.PrivacyBudgetExceeded):
        f.fit(1)                                      # refused before any site trains
    assert f.version == before


def test_dp_aggregate_is_the_clipped_mean_plus_calibrated_noise(pool, monkeypatch):
    # replace the noise by a known vector to check what it is added to: sum of clipped deltas, divided by 3
    from scellis_jupyter.federated import federation as fmod
    drawn = {}

    def fake(size, std):
        drawn["std"] = std
        drawn["z"] = np.linspace(-1, 1, size) * std
        return drawn["z"]
    monkeypatch.setattr(fmod, "gaussian_noise", fake)
    p = Privacy(epsilon=50.0, delta=1e-5, clip=0.05, noise_multiplier=0.7)
    d = data3()
    f = Federation(pool, SPEC, d, privacy=p, batch_size="full", local_steps=3)
    w0 = dict(f.weights)
    f.fit(1)
    assert drawn["std"] == pytest.approx(0.7 * 0.05)
    # the clear per-site deltas, from one-site federations (full batch: the batch order does not matter)
    deltas = []
    for s in d:
        one = Federation(pool, SPEC, {s: d[s]}, batch_size="full", local_steps=3)
        one.weights = dict(w0)
        one.fit(1)
        v = np.concatenate([(one.weights[k] - w0[k]).ravel() for k in sorted(w0)])
        deltas.append(v * min(1.0, 0.05 / np.linalg.norm(v)))
    want = (np.sum(deltas, axis=0) + drawn["z"]) / 3
    got = np.concatenate([(f.weights[k] - w0[k]).ravel() for k in sorted(w0)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_under_secure_aggregation_the_sites_add_the_noise(pool, monkeypatch):
    from scellis_jupyter.federated import federation as fmod
    stds = []
    real = fmod.gaussian_noise

    def spy(size, std):
        stds.append(std)
        return real(size, std)
    monkeypatch.setattr(fmod, "gaussian_noise", spy)     # in-process workers: the sites' draws are seen too
    p = Privacy(epsilon=10.0, delta=1e-5, clip=0.5, noise_multiplier=1.2)
    f = Federation(pool, SPEC, data3(), trust="consortium", privacy=p, batch_size="full", local_steps=1, quorum=2)
    f.fit(1)
    # three site shares of std z C / sqrt(quorum): any 2 survivors sum to variance >= (z C)^2; none central
    assert stds == pytest.approx([1.2 * 0.5 / math.sqrt(2)] * 3)
    assert f.ledger.spent == pytest.approx(epsilon_of([1.2], 1e-5))


# ---- forgeries (issue 36, item 8): the budget cannot be spent again, nor its accounting rewritten ------------
def _spend(path, rounds=3, z=1.5, budget=10.0):
    led = PrivacyLedger(budget, 1e-5, path)
    for _ in range(rounds):
        led.charge(z)
    return led


def _reopen(path, budget=10.0, **kw):
    return PrivacyLedger(budget, 1e-5, path, **kw)


def test_dropping_the_last_line_does_not_refund_it(tmp_path):
    path = tmp_path / "budget.jsonl"
    _spend(path)
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(sc.ScellisError, match="holds 2 rounds but its pin says 3"):
        _reopen(path)


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_dropping_every_line_does_not_refund_the_budget(tmp_path, how):
    path = tmp_path / "budget.jsonl"
    _spend(path)
    path.write_text("") if how == "emptied" else path.unlink()
    with pytest.raises(sc.ScellisError, match="holds 0 rounds but its pin says 3"):
        _reopen(path)


def test_noise_multipliers_rewritten_with_matching_epsilons_are_refused(tmp_path):
    path = tmp_path / "budget.jsonl"
    spent = _spend(path).spent
    lines, zs = [json.loads(x) for x in path.read_text().splitlines()], []
    for e in lines:                                   # the forger's edit keeps each line self-consistent
        zs.append(50.0)
        e.update(noise_multiplier=50.0, epsilon=epsilon_of(zs, 1e-5))
    path.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in lines))
    assert epsilon_of(zs, 1e-5) < spent / 10
    with pytest.raises(sc.ScellisError, match="line 1"):
        _reopen(path)


def _resign(path, key):
    """The forger's full tool: rewrite the multipliers, recompute eps, re-chain and re-sign every line."""
    from scellis_jupyter.pool.keys import public_hex
    from scellis_jupyter.federated.privacy import entry_hash
    out, prev, zs = [], "0" * 64, []
    for e in (json.loads(x) for x in path.read_text().splitlines()):
        zs.append(50.0)
        e.update(noise_multiplier=50.0, epsilon=epsilon_of(zs, 1e-5), prev=prev, signer=public_hex(key))
        e.pop("hash"), e.pop("signature")
        h = entry_hash(e)
        out.append(dict(e, hash=h, signature=key.sign(h.encode()).hex()))
        prev = h
    path.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in out))


def test_a_resigned_privacy_ledger_is_refused_by_its_pinned_signer_and_head(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from scellis_jupyter import settings
    path = tmp_path / "budget.jsonl"
    _spend(path)
    _resign(path, Ed25519PrivateKey.generate())       # a forger's key: the signer is not the pinned one
    with pytest.raises(sc.ScellisError, match="line 1 is signed by key [0-9a-f]{64}, expected [0-9a-f]{64}"):
        _reopen(path)
    path2 = tmp_path / "budget2.jsonl"                 # the holder of the key itself: the pinned head differs
    _spend(path2)
    own = serialization.load_pem_private_key((settings.key_dir() / "federation.key").read_bytes(), password=None)
    _resign(path2, own)
    with pytest.raises(sc.ScellisError, match="entry 3 is not the one its head names"):
        _reopen(path2)


def test_the_accounting_is_recomputed_from_the_mechanism_on_open(tmp_path):
    path = tmp_path / "budget.jsonl"
    led = _spend(path)
    again = _reopen(path)
    assert again.spent == pytest.approx(epsilon_of([1.5] * 3, 1e-5)) == pytest.approx(led.spent)
    assert again.head() == led.head() and again.head()["count"] == 3


def test_a_federation_pins_its_privacy_signer_and_each_round_keeps_the_head(pool, tmp_path, monkeypatch):
    path = tmp_path / "budget.jsonl"
    p = Privacy(epsilon=50.0, delta=1e-5, clip=0.5, noise_multiplier=2.0)
    f = Federation(pool, SPEC, data3(), privacy=p, privacy_ledger=str(path), batch_size="full", local_steps=1)
    rs = f.fit(2)
    head = rs[-1].privacy_head
    assert head == f.ledger.head() and head["count"] == 2 and rs[0].privacy_head["count"] == 1
    with pytest.raises(sc.FederatedError, match=f"signed by key {head['public_key']}, expected {'1' * 64}"):
        Federation(pool, SPEC, data3(), privacy=p, privacy_ledger=str(path), privacy_key="1" * 64)
    f2 = Federation(pool, SPEC, data3(), privacy=p, privacy_ledger=str(path), privacy_key=head["public_key"])
    assert f2.ledger.spent == pytest.approx(epsilon_of([2.0, 2.0], 1e-5))
    # elsewhere (no pin in this key store): the round record's head still refuses a dropped last line
    path.write_text(path.read_text().splitlines(keepends=True)[0])
    monkeypatch.setenv("SCELLIS_KEY_DIR", str(tmp_path.parent / (tmp_path.name + "-elsewhere")))
    assert PrivacyLedger(50.0, 1e-5, path, public_key=head["public_key"]).spent > 0
    with pytest.raises(sc.FederatedError, match="holds 1 rounds but a round record says 2"):
        PrivacyLedger(50.0, 1e-5, path, public_key=head["public_key"], heads=[head])
