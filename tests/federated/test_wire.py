"""What crosses the wire: on a Pool of three worker processes (real TCP), every frame every process writes
(client, scheduler, workers) is scanned for the sites' raw rows; none is found, while the server model's
bytes are (the spy sees payloads), and a deliberately leaking task is caught (the spy sees rows if sent)."""
from __future__ import annotations

import sys

import cloudpickle
import dask
import numpy as np
import pytest
from sklearn.datasets import load_digits

from scellis_jupyter.federated import Federation
from scellis_jupyter.federated.splits import iid_split
from scellis_jupyter.pool import Pool

cloudpickle.register_pickle_by_value(sys.modules[__name__])     # the spy travels to the worker processes

SPEC = """
name = "fed-wire"
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { name = "logits", op = "linear", out = 10 }]
[recipe]
loss = "cross_entropy"
optimizer = { name = "sgd", lr = 0.1 }
batch_size = 32
determinism = "debug"
seed = 0
"""


def install(patterns: dict, controls: dict) -> bool:
    """Wrap this process's TCP frame encoder: count every frame written and which patterns it contains."""
    import dask as _dask
    import distributed.comm.tcp as tcp
    assert not _dask.config.get("distributed.comm.compression"), "frames must be scanned uncompressed"
    spy = {"frames": 0, "bytes": 0, "hits": {}, "controls": {}}
    orig = getattr(tcp, "_scellis_orig_to_frames", tcp.to_frames)
    tcp._scellis_orig_to_frames = orig

    async def to_frames(msg, **kw):
        frames = await orig(msg, **kw)
        for f in frames:
            b = bytes(f)
            spy["frames"] += 1
            spy["bytes"] += len(b)
            for name, pats in patterns.items():
                if any(p in b for p in pats):
                    spy["hits"][name] = spy["hits"].get(name, 0) + 1
            for name, pats in controls.items():
                if any(p in b for p in pats):
                    spy["controls"][name] = spy["controls"].get(name, 0) + 1
        return frames
    tcp.to_frames = to_frames
    tcp._scellis_spy = spy
    return True


def report() -> dict:
    import distributed.comm.tcp as tcp
    return dict(tcp._scellis_spy)


def leak(key: str):
    from scellis_jupyter.federated.site import held
    return held(key).x[:4].copy()


def row_patterns(x: np.ndarray) -> list[bytes]:
    rows = x[:: max(1, len(x) // 12)]
    return [r.astype(np.float32).tobytes() for r in rows] + [r.astype(np.float64).tobytes() for r in rows]


@pytest.mark.slow
def test_no_raw_rows_cross_the_wire(tmp_path, monkeypatch):
    monkeypatch.setenv("DASK_DISTRIBUTED__COMM__COMPRESSION", "False")
    x, y = load_digits(return_X_y=True)
    x, y = (x / 16).astype(np.float32), y.astype(np.int64)
    parts = iid_split(len(x), 3, seed=0)
    sites, patterns = {}, {}
    for i, p in enumerate(parts):
        path = tmp_path / f"site{i}.npz"
        np.savez(path, x=x[p], y=y[p])                 # each site reads its own file, on its worker
        sites[f"site{i}"] = str(path)
        patterns[f"site{i}"] = row_patterns(x[p])
    with dask.config.set({"distributed.comm.compression": False}), Pool(workers=3) as pool:
        assert pool.cluster.scheduler_address.startswith("tcp://")
        install(patterns, {})
        fed = Federation(pool, SPEC, sites, local_steps=5)
        controls = {"server model": [np.asarray(v, np.float64).tobytes()[:512] for v in fed.weights.values()]}
        install(patterns, controls)
        pool.client.run(install, patterns, controls)
        pool.client.run_on_scheduler(install, patterns, controls)
        fed.fit(2)
        assert len(set(fed.where.values())) == 3           # three sites on three worker processes
        secure = Federation(pool, SPEC, sites, local_steps=5, secure=True)     # masks, keys and shares over TCP
        secure.weights = dict(fed.weights)
        assert secure.fit(1)[0].sites == ["site0", "site1", "site2"]
        reports = [report()] + list(pool.client.run(report).values()) + [pool.client.run_on_scheduler(report)]
        frames = sum(r["frames"] for r in reports)
        assert frames > 50 and sum(r["bytes"] for r in reports) > 100_000
        assert sum(r["controls"].get("server model", 0) for r in reports) > 0, "the spy saw no payloads"
        assert all(r["hits"] == {} for r in reports), f"raw rows crossed the wire: {[r['hits'] for r in reports]}"
        # positive control: a task that returns rows is caught by the same spy
        got = pool.client.submit(leak, fed._key("site1"), workers=[fed.where["site1"]], pure=False).result()
        assert np.array_equal(got, x[parts[1]][:4])
        reports = [report()] + list(pool.client.run(report).values())
        assert any(r["hits"].get("site1") for r in reports)
