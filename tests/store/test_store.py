"""`Store.resolve_checkpoint` (hash, prefix, ref, run id; suggestions among checkpoints only; objects that
are not checkpoints named as such) and `Store.log_path`. Tolerance: none (exact names)."""
import pytest

from scellis_jupyter.store import Store, StoreError

from fixtures.store import step_checkpoint


def _err(store, ref) -> StoreError:
    with pytest.raises(StoreError) as e:
        store.resolve_checkpoint(ref)
    return e.value


def test_resolve_by_hash_prefix_ref_and_run(store):
    h = step_checkpoint(store, 1)
    assert store.resolve_checkpoint(h) == h and store.resolve_checkpoint(h[:6].upper()) == h
    store.set_ref("best", h)
    assert store.resolve_checkpoint("best") == h
    run = store.start_run(spec_hash="spec")
    h2 = step_checkpoint(store, 2, run=run.id)
    run.checkpoint(h2, 2, 0)
    assert store.resolve_checkpoint(run.id) == h2


def test_unknown_hash_suggests_close_checkpoints_not_other_objects(store):
    h = step_checkpoint(store, 1)
    blobs = [store.put_bytes(bytes([i]) * 10) for i in range(40)]       # many non-checkpoint objects
    wrong = h[:5] + ("0" if h[5] != "0" else "1") + "abc"
    e = _err(store, wrong)
    d = e.diagnostic
    assert d.code == "store-unknown" and d.message == f"no checkpoint {wrong!r} in the store"
    assert d.details["suggestions"] == [h] and h[:12] in d.hint
    e = _err(store, blobs[0][:10])                                       # a unique object that is no checkpoint
    assert e.diagnostic.code == "checkpoint-malformed" and "not a checkpoint" in e.diagnostic.message
    e = _err(store, "bets")
    assert "no checkpoint, ref or run named 'bets'" in e.diagnostic.message
    store.set_ref("best", h)
    assert "did you mean 'best'" in _err(store, "bets").diagnostic.hint
    assert "no checkpoints yet" in _err(Store.open(store.root.parent / "empty"), "abcd").diagnostic.hint


def test_ambiguous_prefix_among_checkpoints(store):
    hs = [step_checkpoint(store, s) for s in range(40)]
    p = next(h[:1] for h in hs if sum(x.startswith(h[:1]) for x in hs) > 1)
    e = _err(store, p)
    assert e.diagnostic.code == "store-ambiguous" and "checkpoints match" in e.diagnostic.message


def test_log_path(store):
    p = store.log_path("run-x", "log")
    assert p == store.root / "logs" / "run-x.log" and p.parent.is_dir()
