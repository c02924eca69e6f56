"""Three trust regimes, never collapsed: TLS consortium pools, and the refusals each regime enforces."""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F
from scellis_jupyter.pool import Job, Pool
from scellis_jupyter.pool.datashard import DataProgram
from pool_certs import issue, make_ca, security

X = np.arange(12.0).reshape(3, 4)
SQ = DataProgram(lambda x: F.mul(x, x), name="square")


def square(x):
    return x * x


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    d = tmp_path_factory.mktemp("ca")
    key, cert, pem = make_ca(d, "consortium-ca")
    member = security(pem, *issue(d, key, cert, "lab-a"))
    partner = security(pem, *issue(d, key, cert, "lab-b"))
    okey, ocert, opem = make_ca(d, "other-ca")
    outsider = security(opem, *issue(d, okey, ocert, "intruder"))
    return member, partner, outsider


@pytest.fixture(scope="module")
def consortium(ca):
    with Pool(workers=2, processes=False, trust="consortium", security=ca[0]) as p:
        yield p


@pytest.fixture(scope="module")
def open_pool():
    with Pool(processes=False, trust="open") as p:
        yield p


def test_a_consortium_pool_speaks_tls_and_runs_data_shards(consortium, ca):
    assert consortium.cluster.scheduler_address.startswith("tls://")
    assert all(w.startswith("tls://") for w in consortium.workers())
    r = consortium.run(Job(SQ, inputs={"items": [X, X + 1]}, verify="reference", classification="confidential",
                           safety_critical=True))        # partner labs may see confidential, safety-critical work
    np.testing.assert_array_equal(r.value[1], (X + 1) ** 2)
    with Pool(address=consortium.cluster.scheduler_address, trust="consortium", security=ca[1], timeout=5) as lab_b:
        assert len(lab_b.workers()) == 2                   # another member's certificate from the same CA joins


def test_a_client_without_the_consortiums_certificate_is_refused(consortium, ca):
    from distributed import Client
    addr = consortium.cluster.scheduler_address
    with pytest.raises(sc.PoolUnreachable, match="TLS"):
        Pool(address=addr, timeout=2)                      # no certificate at all
    with pytest.raises(sc.PoolUnreachable, match="TLS") as e:
        Pool(address=addr, trust="consortium", security=ca[2], timeout=2)   # a certificate from another CA
    assert "certificate" in e.value.diagnostic.details["cause"].lower() or "ssl" in e.value.diagnostic.details["cause"].lower()
    with pytest.raises(OSError):
        Client(addr.replace("tls://", "tcp://"), timeout=2)  # plain TCP to the TLS port


def test_a_consortium_pool_needs_certificates():
    with pytest.raises(sc.TrustRefused, match="needs TLS with certificates") as e:
        Pool(trust="consortium")
    assert e.value.diagnostic.code == "trust-refused" and "Security" in e.value.diagnostic.hint
    with pytest.raises(sc.TrustRefused, match="unknown trust regime"):
        Pool(trust="friends")


def _job(**kw):
    base = dict(fn=SQ, inputs={"items": [X]}, verify="reference", classification="public")
    base.update(kw)
    return Job(**base)


REFUSALS_OPEN = [
    (dict(safety_critical=True), "safety-critical job does not run on an open pool"),
    (dict(classification="internal"), "input 'items' is classified 'internal': an open pool gets only public data"),
    (dict(classification=None), "input 'items' is undeclared"),
    (dict(classification="confidential"), "input 'items' is a confidential dataset"),
    (dict(classification={"items": "public", "model": "confidential"}), "model is confidential"),
    (dict(classification={"items": "public"}), "model is undeclared"),
    (dict(verify="none"), "an open pool verifies every job; this one declares verify='none'"),
    (dict(verify="spot", fraction=0.0), "checks nothing"),
    (dict(fn=square), "only an own pool may ship Python callables; square is one"),
    (dict(fn=lambda x: x), "only an own pool may ship Python callables"),
    (dict(params={"post": square}), "params.post is a function"),
]


@pytest.mark.parametrize("kw,match", REFUSALS_OPEN, ids=[m[:24] for _, m in REFUSALS_OPEN])
def test_an_open_pool_refuses_before_anything_is_sent(open_pool, kw, match):
    sent = []
    submit = open_pool.client.submit
    open_pool.client.submit = lambda *a, **k: sent.append(a) or submit(*a, **k)
    try:
        with pytest.raises(sc.TrustRefused, match=match) as e:
            open_pool.run(_job(**kw))
    finally:
        open_pool.client.submit = submit
    assert sent == [] and e.value.diagnostic.code == "trust-refused"
    assert str(e.value).startswith("error[trust-refused] at Job ") and "on an open pool" in e.value.diagnostic.where


@pytest.mark.parametrize("kw,match", [(dict(verify="none"), "verify='none'"),
                                      (dict(fn=square), "only an own pool may ship Python callables")])
def test_a_consortium_pool_refuses_unverified_jobs_and_callables(consortium, kw, match):
    with pytest.raises(sc.TrustRefused, match=match):
        consortium.run(_job(**kw))


def test_an_open_pool_runs_a_public_job_and_an_own_pool_takes_anything(open_pool):
    r = open_pool.run(_job(classification={"items": "public", "model": "internal"}))
    np.testing.assert_array_equal(r.value[0], X * X)
    with Pool(processes=False) as own:                    # own: callables, any class, verification optional
        r = own.run(Job(square, inputs={"items": [X]}, classification="confidential", safety_critical=True))
    np.testing.assert_array_equal(r.value[0], X * X)
    with pytest.raises(sc.TrustRefused, match="classified 'secret'"):
        Pool.run(own, Job(square, inputs={"items": [X]}, classification="secret"))
