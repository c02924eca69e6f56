"""Canary shards with known answers, stale (replayed) answers, and a worker that lies only sometimes."""
from __future__ import annotations

import random
import re
import threading

import numpy as np
import pytest
from distributed.diagnostics.plugin import WorkerPlugin
from scipy.stats import binomtest

import scellis_jupyter as sc
from scellis_jupyter.graph import functional as F
from scellis_jupyter.pool import Job, Pool
from scellis_jupyter.pool.datashard import DataProgram

LIES: list = []
_LOCK = threading.Lock()


def square(x):
    return np.float64(x) ** 2


class Liar:
    """On the `bad` workers, a result perturbed at `rate`: whether it lies about x is a seeded draw of its own
    (a worker may get a copy of this object per task, so no state carries from one call to the next)."""

    def __init__(self, bad: set, rate: float = 1.0, seed: int = 0):
        self.bad, self.rate, self.seed = set(bad), rate, seed

    def __call__(self, x):
        from distributed import get_worker
        if get_worker().address in self.bad and random.Random(f"{self.seed}:{x}").random() < self.rate:
            with _LOCK:
                LIES.append(x)
            return square(x) * (1 + 1e-3) + 1e-3
        return square(x)


@pytest.fixture(autouse=True)
def _clear():
    LIES.clear()
    REPLAY.clear()


def test_a_canary_catches_a_liar_that_spot_checks_miss_and_its_work_is_re_run():
    # spot-checks at one in a billion: the lies would pass; one canary per peer, known answers, catches it
    with Pool(workers=3, processes=False) as p:
        bad = p.workers()[1]
        sent = []
        submit = p.client.submit
        p.client.submit = lambda *a, **k: sent.append(k.get("key", "")) or submit(*a, **k)
        r = p.run(Job(Liar({bad}), inputs={"items": list(range(12))}, verify="spot", fraction=1e-9,
                      reference=square, canaries=1))
        assert p.quarantined == {bad}
    assert LIES, "the liar never lied: the test proves nothing"
    assert r.value == [square(i) for i in range(12)]              # nothing it said survived
    assert r.canaries == 3 and [w for i, w, _ in r.rejected if i == -1] == [bad]
    assert all(reason.startswith("canary: differs") for i, _, reason in r.rejected if i == -1)
    shard_keys = [k for k in sent if k.startswith("shard-")]
    assert all(re.fullmatch(r"shard-[0-9a-f]{24}-0", k) for k in shard_keys)   # a canary looks like any shard
    assert len(shard_keys) >= 12 + 3


def test_honest_peers_pass_their_canaries(tmp_path):
    with Pool(workers=2, processes=False, ledger=tmp_path / "l.sqlite") as p:
        r = p.run(Job(square, inputs={"items": list(range(6))}, verify="spot", fraction=0.5, canaries=2))
        assert p.ledger.verify()["receipts"] == 6                  # canaries mint no receipts
    assert r.value == [square(i) for i in range(6)] and r.canaries == 4 and not r.rejected and not r.revoked


# ---- stale answers: a byzantine peer replays answers it gave an earlier version of the job ----------------
REPLAY: dict = {}          # worker address -> {"mode": "record"|"replay", "answers": [...]}; in-process workers


class Replayer(WorkerPlugin):
    """A worker plugin: on the workers in REPLAY, records its shard answers, then answers with old ones."""

    name = "replayer"

    def setup(self, worker):
        self.worker = worker

    def transition(self, key, start, finish, **kw):
        st = REPLAY.get(self.worker.address)
        if st is None or finish != "memory" or not str(key).startswith("shard-"):
            return
        if st["mode"] == "record":
            st["answers"].append(self.worker.data[key])
        elif st["answers"]:
            self.worker.data[key] = st["answers"].pop(0)
            st["replayed"] += 1


MM = DataProgram(lambda x: F.mul(x, x), name="square")


@pytest.mark.parametrize("trust", ["own", "open"])
def test_a_stale_answer_is_rejected_even_when_no_value_check_would_run(trust):
    fn = MM if trust == "open" else square
    v1 = [np.full(3, float(i)) for i in range(6)]
    v2 = [x + 100.0 for x in v1]                                    # version 2 of the job: new inputs
    with Pool(workers=2, processes=False, trust=trust) as p:
        p.client.register_plugin(Replayer())
        bad = p.workers()[0]
        REPLAY[bad] = {"mode": "record", "answers": [], "replayed": 0}
        job = dict(verify="spot", fraction=1e-9, reference=None, classification="public")
        p.run(Job(fn, inputs={"items": v1}, **job))
        assert REPLAY[bad]["answers"], "the byzantine peer recorded nothing: the test proves nothing"
        REPLAY[bad]["mode"] = "replay"
        r = p.run(Job(fn, inputs={"items": v2}, **job))
        assert p.quarantined == {bad}
    assert REPLAY[bad]["replayed"] >= 1
    for got, x in zip(r.value, v2):
        np.testing.assert_array_equal(got, x * x)                   # no replayed answer entered the reduction
    assert r.rejected and all(w == bad and "stale" in reason for _, w, reason in r.rejected)
    assert r.checked <= 1                                           # the values were (almost) never checked


# ---- a worker that lies only sometimes, in spot-check mode ---------------------------------------------
def test_a_sometimes_liar_is_caught_at_the_spot_check_rate():
    """Each lie is caught independently with probability `fraction`, so over L lies the catches are
    Binomial(L, fraction): the test fails a correct pool with probability < 1e-4 (two-sided exact binomial
    test at that level); an honest answer is never rejected."""
    trials, rate, fraction = 200, 0.5, 0.3
    lied = caught = false_alarms = 0
    with Pool() as p:
        liar = Liar(set(p.workers()), rate=rate, seed=11)
        for t in range(trials):
            p.quarantined.clear()
            before = len(LIES)
            try:
                r = p.run(Job(liar, inputs={"items": [t]}, verify="spot", fraction=fraction, reference=square))
                got = r.value[0]
                rejected = False
            except sc.RejectedResult:
                rejected = True
            lie = len(LIES) > before
            lied += lie
            caught += lie and rejected
            false_alarms += rejected and not lie
            if lie and not rejected:
                assert got != square(t)                             # an uncaught lie is really a lie
    print(f"sometimes-liar: {lied} lies in {trials} trials, {caught} caught ({caught / lied:.3f}; stated {fraction})")
    assert 60 < lied < 140 and false_alarms == 0
    assert binomtest(caught, lied, fraction).pvalue > 1e-4, (caught, lied)
