"""Checkpoints: bit-exact round trips (f32/f16/i32/u8/f64, 0-d, NaN/-0/inf), the optimizer's param ->
slot -> array nesting, the manifest as canonical JSON (re-serialized here with the stdlib json module),
parent chains, spec mismatch refused with a diff, malformed manifests refused naming the field, every
named object verified on load. Tolerance: none (bytes, dtypes and shapes compared exactly).
"""
import json

import blake3
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.store import Checkpoint, Store, StoreError, check_spec, load_checkpoint, save_checkpoint


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "s")


def _weights(seed=0):
    r = np.random.default_rng(seed)
    return {"enc/layer0.w": r.standard_normal((4, 3)).astype(np.float32),
            "enc/layer0.b": np.array([np.nan, -0.0, np.inf], np.float32),
            "half": r.standard_normal(6).astype(np.float16), "ids": np.arange(-4, 4, dtype=np.int32),
            "mask": r.integers(0, 255, (2, 2, 2)).astype(np.uint8), "scale": np.array(0.5, np.float32),
            "count": np.array(7, np.int32), "f64": r.standard_normal(3)}


def _opt(seed=0):
    r = np.random.default_rng(seed + 100)
    return {"enc/layer0.w": {"m": r.standard_normal((4, 3)).astype(np.float32),
                             "v": np.abs(r.standard_normal((4, 3))).astype(np.float32),
                             "step": np.array(3, np.int32)},
            "half": {"m": np.zeros(6, np.float16)}, "ids": {}}


def _save(store, step=10, parent=None, spec="spec-a", **kw):
    args = dict(weights=_weights(), optimizer_state=_opt(), rng_state={"seed": 42, "positions": {"init": 96, "dropout": 8}},
                epoch=1, step=step, metrics_history={"loss": [[5, 0.9], [10, 0.7]], "acc": [[10, 0.5]]},
                spec_hash=spec, parent=parent, extra={"note": "hi"})
    args.update(kw)
    return save_checkpoint(store, **args)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_round_trip_bit_exact(store):
    h = _save(store)
    c = load_checkpoint(store, h)
    assert isinstance(c, Checkpoint) and c.hash == h
    w = _weights()
    assert set(c.weights) == set(w) and all(_same(c.weights[k], w[k]) for k in w)
    assert c.weights["scale"].shape == () and c.weights["count"].shape == ()
    o = _opt()
    assert set(c.optimizer_state) == set(o)
    for p in o:
        assert set(c.optimizer_state[p]) == set(o[p])
        assert all(_same(c.optimizer_state[p][s], o[p][s]) for s in o[p])
    assert c.rng_state == {"seed": 42, "positions": {"dropout": 8, "init": 96}}
    assert (c.epoch, c.step, c.spec_hash, c.parent, c.extra) == (1, 10, "spec-a", None, {"note": "hi"})
    assert c.metrics_history == {"loss": [[5, 0.9], [10, 0.7]], "acc": [[10, 0.5]]}
    assert c.engine_version == sc.__version__
    # the manifest is canonical JSON of what it says, named by its BLAKE3
    raw = store.get_bytes(h)
    m = json.loads(raw)
    assert raw == json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert blake3.blake3(raw).hexdigest() == h
    assert m["weights"] == c.weights_hash and m["optimizer_state"] == c.optimizer_hash
    # optimizer tensors are flat "param/slot" keys (param names may contain '/')
    assert set(store.get_tensors(c.optimizer_hash)) == {"enc/layer0.w/m", "enc/layer0.w/v", "enc/layer0.w/step",
                                                        "half/m"}
    assert store.index.checkpoint(h)["step"] == 10


def test_same_weights_same_object(store):
    a, b = _save(store, step=1), _save(store, step=2)
    ca, cb = load_checkpoint(store, a), load_checkpoint(store, b)
    assert a != b and ca.weights_hash == cb.weights_hash and ca.optimizer_hash == cb.optimizer_hash
    assert len(store.index.objects("checkpoint-weights")) == 1


def test_parent_chain_and_references(store):
    chain = [None]
    for step in (1, 2, 3):
        chain.append(_save(store, step=step, parent=chain[-1] and chain[-1][:10]))   # a prefix resolves
    walk, h = [], chain[-1]
    while h:
        c = load_checkpoint(store, h)
        walk.append(c.step)
        h = c.parent
    assert walk == [3, 2, 1]
    assert load_checkpoint(store, chain[2][:8]).step == 2
    store.set_ref("best", chain[1])
    assert load_checkpoint(store, "best").step == 1
    run = store.start_run(spec_hash="spec-a")
    run.checkpoint(chain[3], step=3, epoch=1)
    assert load_checkpoint(store, run.id).hash == chain[3]
    with pytest.raises(StoreError) as e:
        _save(store, parent="0" * 64)
    assert e.value.diagnostic.code == "store-unknown"


def test_spec_mismatch_refused_with_diff(store):
    a = store.put_text("[model]\nlayers = 2\nlr = 0.1\n")
    b = store.put_text("[model]\nlayers = 2\nlr = 0.2\n")
    c = load_checkpoint(store, _save(store, spec=a))
    check_spec(c, a)                                       # same spec: fine
    store.check_spec(c, a)
    with pytest.raises(StoreError) as e:
        store.check_spec(c, b)
    d = e.value.diagnostic
    assert d.code == "spec-mismatch"
    lines = d.details["diff"].splitlines()
    assert "-lr = 0.1" in lines and "+lr = 0.2" in lines and " layers = 2" in lines
    assert "-layers = 2" not in lines and "lr = 0.2" in d.message
    with pytest.raises(StoreError) as e:                   # texts unknown: still refused, says so
        check_spec(c, "f" * 64)
    assert e.value.diagnostic.code == "spec-mismatch" and e.value.diagnostic.details["diff"] == ""
    with pytest.raises(StoreError) as e:
        check_spec(c, b, {a: "x = 1\n", b: "x = 2\n"})     # a mapping works too
    assert "+x = 2" in e.value.diagnostic.details["diff"].splitlines()


def _manifest(store):
    return store.get_json(_save(store))


@pytest.mark.parametrize("field,value", [("step", None), ("step", "ten"), ("epoch", -1), ("weights", 5),
                                         ("rng_state", {"positions": {}}), ("rng_state", {"seed": 1, "positions": [1]}),
                                         ("metrics_history", {"loss": [[1]]}), ("format", "pickle"),
                                         ("version", 99), ("optimizer_slots", {"ids": ["m"]}), ("parent", 3),
                                         ("extra", []), ("created", "now")])
def test_malformed_manifest_refused_naming_field(store, field, value):
    m = _manifest(store)
    if value is None:
        del m[field]
    else:
        m[field] = value
    h = store.put_json(m, kind="checkpoint")
    with pytest.raises(StoreError) as e:
        load_checkpoint(store, h)
    d = e.value.diagnostic
    assert d.code == "checkpoint-malformed" and d.details["field"] == field and repr(field) in d.where


def test_not_an_object_manifest(store):
    with pytest.raises(StoreError) as e:
        load_checkpoint(store, store.put_json([1, 2]))
    assert e.value.diagnostic.code == "checkpoint-malformed"


def test_tampered_tensors_refused(store):
    c = load_checkpoint(store, _save(store))
    p = store.root / "objects" / c.optimizer_hash[:2] / c.optimizer_hash[2:]
    b = bytearray(p.read_bytes())
    b[-1] ^= 0xFF
    p.write_bytes(bytes(b))
    with pytest.raises(StoreError) as e:
        load_checkpoint(store, c.hash)
    assert e.value.diagnostic.code == "store-corrupt" and c.optimizer_hash in e.value.diagnostic.message


@pytest.mark.parametrize("kw,field", [({"rng_state": {"positions": {}}}, "rng_state"),
                                      ({"rng_state": {"seed": 1, "positions": {"init": -1}}}, "rng_state"),
                                      ({"optimizer_state": {"w": {"a/b": np.zeros(1)}}}, "optimizer_state"),
                                      ({"step": -3}, "step"), ({"epoch": 1.5}, "epoch"), ({"spec_hash": ""}, "spec_hash"),
                                      ({"metrics_history": {"loss": [[1, "x"]]}}, "metrics_history"),
                                      ({"weights": [1]}, "weights")])
def test_bad_save_arguments(store, kw, field):
    with pytest.raises(StoreError) as e:
        _save(store, **kw)
    assert e.value.diagnostic.code == "bad-argument" and field in e.value.diagnostic.where
