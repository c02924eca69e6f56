"""Content-addressed objects: names are BLAKE3 of the bytes (computed here with the `blake3` package),
tensors round-trip bit-exactly through safetensors (parsed here with `safetensors.numpy` directly), a
tampered or truncated object is refused, prefixes resolve like git, write failures leave nothing behind.
Tolerance: none; every comparison is exact (bytes, hashes, dtypes, shapes).
"""
import errno
import os
import subprocess
import sys
import textwrap

import blake3
import numpy as np
import pytest
import safetensors.numpy as stnp

from scellis_jupyter.errors import ScellisError
from scellis_jupyter.store import Store, StoreError


@pytest.fixture
def store(tmp_path):
    return Store.open(tmp_path / "s")


def test_bytes_round_trip_and_name_is_blake3(store):
    data = os.urandom(10_000)
    h = store.put_bytes(data)
    assert h == blake3.blake3(data).hexdigest()
    assert (store.root / "objects" / h[:2] / h[2:]).read_bytes() == data
    assert store.get_bytes(h) == data
    assert store.put_bytes(data) == h                      # idempotent, one file
    assert len(list((store.root / "objects" / h[:2]).iterdir())) == 1
    assert store.get_bytes(store.put_bytes(b"")) == b""
    assert issubclass(StoreError, ScellisError)


def test_tensors_deterministic_and_bit_exact(store):
    rng = np.random.default_rng(0)
    t = {"w": rng.standard_normal((3, 4)).astype(np.float32), "h": rng.standard_normal(5).astype(np.float16),
         "i": np.arange(-3, 3, dtype=np.int32), "u": np.arange(7, dtype=np.uint8), "s": np.array(2.5),
         "nan": np.array([np.nan, -0.0, np.inf], np.float32), "t": np.arange(12.0).reshape(3, 4).T}
    h1 = store.put_tensors(t)
    h2 = store.put_tensors(dict(reversed(list(t.items()))))   # other insertion order, same content
    assert h1 == h2
    raw = (store.root / "objects" / h1[:2] / h1[2:]).read_bytes()
    assert blake3.blake3(raw).hexdigest() == h1
    for parsed in (stnp.load(raw), store.get_tensors(h1[:10])):
        assert set(parsed) == set(t)
        for k, a in t.items():
            b = parsed[k]
            assert b.dtype == a.dtype and b.shape == a.shape and b.tobytes() == a.tobytes(order="C"), k
    changed = dict(t, w=np.nextafter(t["w"], np.float32(np.inf)))
    assert store.put_tensors(changed) != h1                  # one ulp changes the name


def test_tensors_bad_input_is_store_error(store):
    with pytest.raises(StoreError) as e:
        store.put_tensors({"x": np.array(["a"], dtype=object)})
    assert e.value.diagnostic.code == "bad-argument"
    with pytest.raises(StoreError):
        store.put_tensors([1, 2])


def test_json_canonical(store):
    h = store.put_json({"b": 1, "a": [1, 2.5, None], "c": {"z": True, "y": "é"}})
    expected = '{"a":[1,2.5,null],"b":1,"c":{"y":"é","z":true}}'.encode()
    assert store.get_bytes(h) == expected and h == blake3.blake3(expected).hexdigest()
    assert store.get_json(h) == {"b": 1, "a": [1, 2.5, None], "c": {"z": True, "y": "é"}}
    assert store.put_text("x = 1\n") == blake3.blake3(b"x = 1\n").hexdigest()
    with pytest.raises(StoreError):
        store.put_json({"x": object()})


@pytest.mark.parametrize("damage", ["flip", "truncate", "append"])
def test_tampered_object_refused(store, damage):
    data = os.urandom(4096)
    h = store.put_bytes(data)
    p = store.root / "objects" / h[:2] / h[2:]
    b = bytearray(p.read_bytes())
    if damage == "flip":
        b[1234] ^= 0x01
    elif damage == "truncate":
        b = b[:-1]
    else:
        b += b"\0"
    p.write_bytes(bytes(b))
    with pytest.raises(StoreError) as e:
        store.get_bytes(h)
    d = e.value.diagnostic
    assert d.code == "store-corrupt" and h in d.message and str(store.root) in d.where
    assert "error[store-corrupt]" in d.format()
    assert store.verify() == {h: d.message}
    store.put_bytes(data)                                   # re-putting the same bytes heals it
    assert store.get_bytes(h) == data and store.verify() == {}


def test_prefix_resolution_ambiguity_and_suggestions(store):
    hashes = [store.put_bytes(f"blob {i}".encode()) for i in range(150)]
    # find two names sharing 3 leading digits (150 names over 4096 buckets: a pair exists with p > 0.9;
    # the loop below only uses what it finds)
    by3: dict[str, list[str]] = {}
    for h in hashes:
        by3.setdefault(h[:3], []).append(h)
    h = hashes[0]
    assert store.resolve(h) == h and store.resolve(h[:12]) == h and store.resolve(h[:12].upper()) == h
    pairs = [v for v in by3.values() if len(v) > 1]
    if pairs:
        a, b = pairs[0][:2]
        with pytest.raises(StoreError) as e:
            store.resolve(a[:3])
        assert e.value.diagnostic.code == "store-ambiguous" and a[:6] in e.value.diagnostic.message
        k = len(os.path.commonprefix([a, b]))
        assert store.resolve(a[:k + 1]) == a
    # an unknown name that shares 5 digits with a stored one: that one is suggested
    fake = h[:5] + ("0" if h[5] != "0" else "1") * (64 - 5)
    with pytest.raises(StoreError) as e:
        store.get_bytes(fake)
    d = e.value.diagnostic
    assert d.code == "store-unknown" and h[:12] in d.hint and d.details["suggestions"] == [h]
    for bad in ("xyz", "", "a" * 65):
        with pytest.raises(StoreError):
            store.resolve(bad)


def _write_works(d) -> bool:
    try:
        with open(os.path.join(d, "probe"), "wb"):
            pass
        os.unlink(os.path.join(d, "probe"))
        return True
    except OSError:
        return False


def test_read_only_directory_is_clear_error(store):
    data = b"some bytes for a read-only store"
    h = blake3.blake3(data).hexdigest()
    shard = store.root / "objects" / h[:2]
    shard.mkdir(parents=True, exist_ok=True)
    os.chmod(shard, 0o555)
    try:
        if _write_works(shard):
            pytest.skip("running as root: chmod does not stop writes (see the simulated EROFS/ENOSPC test)")
        with pytest.raises(StoreError) as e:
            store.objects.write(data)
        assert e.value.diagnostic.code == "store-readonly" and "SCELLIS_STORE" in e.value.diagnostic.hint
        assert list(shard.iterdir()) == []
    finally:
        os.chmod(shard, 0o755)


@pytest.mark.parametrize("fail_at,err,code", [("fsync", errno.ENOSPC, "store-full"),
                                              ("replace", errno.EROFS, "store-readonly"),
                                              ("replace", errno.EACCES, "store-readonly"),
                                              ("mkstemp", errno.ENOSPC, "store-full")])
def test_write_failure_leaves_nothing(store, monkeypatch, fail_at, err, code):
    """A full or read-only disk, simulated at each step of the atomic write."""
    import tempfile

    def boom(*a, **k):
        raise OSError(err, os.strerror(err))
    target = {"fsync": (os, "fsync"), "replace": (os, "replace"), "mkstemp": (tempfile, "mkstemp")}[fail_at]
    data = os.urandom(100_000)
    h = blake3.blake3(data).hexdigest()
    monkeypatch.setattr(*target, boom)
    with pytest.raises(StoreError) as e:
        store.objects.write(data)
    monkeypatch.undo()
    assert e.value.diagnostic.code == code and "cannot write object" in e.value.diagnostic.message
    assert store.objects.temp_files() == [] and not store.has(h)
    with pytest.raises(StoreError) as e:
        store.get_bytes(h)
    assert e.value.diagnostic.code in ("store-unknown", "store-missing")
    assert store.put_bytes(data) == h and store.get_bytes(h) == data   # works again once the disk does


def test_concurrent_writers_same_object(tmp_path):
    root = tmp_path / "s"
    Store.open(root)
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from scellis_jupyter.store import Store
        s = Store.open({str(root)!r})
        big = np.random.default_rng(7).standard_normal(1_000_000).astype(np.float32)   # same in both
        for i in range(15):
            h = s.put_tensors({{"w": big}})
            s.put_bytes(f"{{sys.argv[1]}} {{i}}".encode())
        print(h)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, text=True)
             for name in ("a", "b")]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    s = Store.open(root)
    big = np.random.default_rng(7).standard_normal(1_000_000).astype(np.float32)
    assert np.array_equal(s.get_tensors(outs[0])["w"], big)
    assert s.verify() == {} and s.objects.temp_files() == []
    assert len(list(s.objects)) == 1 + 30
    assert {r["hash"] for r in s.index.objects()} == set(s.objects)
