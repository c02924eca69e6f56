"""Data-only shards: a Program IR and input bytes, run on the peer's own interpreter with no effect grants."""
from __future__ import annotations

import json
import pickle
import socket
import struct

import blake3
import numpy as np
import pytest
from distributed.diagnostics.plugin import WorkerPlugin

import scellis_jupyter as sc
from scellis_jupyter.backends import reference
from scellis_jupyter.graph import functional as F
from scellis_jupyter.pool import Job, Pool
from scellis_jupyter.pool.datashard import (FORMAT, RESULT_MAGIC, SHARD_MAGIC, DataProgram, _pack, _unpack, ir_hash, open_result, run_data_shard,
                                            shard_header)

RNG = np.random.default_rng(0)
A, B = RNG.standard_normal((12, 5)), RNG.standard_normal((5, 4))


def stats(x, scale=1.0):
    return {"y": F.tanh(F.mul(F.matmul(x, F.transpose(x)), scale)), "s": F.sum_(x, axis=0)}


STATS = DataProgram(stats)
MM = DataProgram(lambda a, b: F.matmul(a, b), name="mm")


def test_a_data_program_computes_what_numpy_does():
    out = STATS(A, scale=0.5)                                      # the peer's path, run locally
    np.testing.assert_allclose(out["y"], np.tanh(0.5 * (A @ A.T)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["s"], A.sum(axis=0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(MM({"a": A, "b": B}), A @ B, rtol=1e-12, atol=1e-14)


def test_an_open_pool_sends_only_bytes_and_a_function_named_by_reference():
    sent = []
    with Pool(workers=2, processes=False, trust="open") as p:
        submit = p.client.submit

        def spy(fn, *args, **kw):
            sent.append((fn, args))
            return submit(fn, *args, **kw)
        p.client.submit = spy
        r = p.run(Job(MM, inputs={"a": A, "b": B}, partitioner="row_blocks", partition={"blocks": 3},
                      reduction="concat_rows", verify="freivalds", classification="public"))
    np.testing.assert_allclose(r.value, A @ B, rtol=1e-12, atol=1e-14)
    shard_tasks = [(fn, args) for fn, args in sent if fn is run_data_shard]
    assert len(shard_tasks) == 3
    assert all(len(args) == 1 and type(args[0]) is bytes and args[0].startswith(SHARD_MAGIC) for _, args in shard_tasks)
    # what names the peer's code is a reference into its own installed engine, not code
    assert b"scellis_jupyter.pool.datashard" in pickle.dumps(run_data_shard) and len(pickle.dumps(run_data_shard)) < 200
    assert {fn.__module__ for fn, _ in sent} <= {"scellis_jupyter.pool.datashard", "scellis_jupyter.pool.pool"}


def _blob():
    return STATS.encode(A, {"scale": 0.5}, stamp="s" * 32)


def craft(blob: bytes, mutate, rehash: bool = True) -> bytes:
    """An attacker's shard: the header edited (and the program re-hashed, so the edit itself is judged)."""
    header, data = _unpack(blob, SHARD_MAGIC, "shard")
    mutate(header)
    if rehash:
        header["program"]["hash"] = ir_hash(header["program"])
    text = json.dumps(header).encode()
    return SHARD_MAGIC + struct.pack("<I", len(text)) + text + bytes(data)


def _op(name):
    def m(h):
        v = next(v for v in h["program"]["values"] if v[0] == "tanh")
        v[0] = name
    return m


def _extra_input_field(h):
    h["inputs"][0]["path"] = "/etc/passwd"


def _input_not_carried(h):
    h["program"]["values"][0][2]["name"] = "weights.bin"


def _forged_shape(h):
    v = next(v for v in h["program"]["values"] if v[0] == "matmul")
    v[3] = [12, 13]


def _huge(h):
    h["program"]["values"].append(["fill", [], {"shape": [1 << 40], "value": 0.0, "dtype": "f64"}, [1 << 40], "f64"])
    h["program"]["outputs"] = [len(h["program"]["values"]) - 1]


@pytest.mark.parametrize("mutate,match", [
    (_op("open"), "op 'open' is not an op of this engine's interpreter"),
    (_op("socket_connect"), "op 'socket_connect' is not an op"),
    (_op("python_eval"), "op 'python_eval' is not an op"),
    (_extra_input_field, r"fields \['path'\].*no path, URL or store reference"),
    (_input_not_carried, "reads input 'weights.bin', which the shard does not carry"),
    (_forged_shape, r"claims shape \[12, 13\]"),
    (_huge, "allocate over"),
    (lambda h: h.update(format="scellis-data-shard/0"), "format"),
    (lambda h: h.update(run="import os"), "fields"),
], ids=["op-open", "op-socket", "op-eval", "input-path", "input-not-carried", "forged-shape", "huge", "format",
        "extra-field"])
def test_a_crafted_shard_is_refused_with_a_clear_error(mutate, match):
    with pytest.raises(sc.ShardRefused, match=match) as e:
        run_data_shard(craft(_blob(), mutate))
    d = e.value.diagnostic
    assert d.code == "shard-refused" and d.where.startswith("data shard") and d.hint


def test_the_peer_allocation_cap_is_read_when_a_shard_arrives(monkeypatch):
    """SCELLIS_PEER_MAX_BYTES was read once at import (a bad value: a bare ValueError on `import`)."""
    blob = _blob()
    monkeypatch.setenv("SCELLIS_PEER_MAX_BYTES", "256")       # stats(A) allocates 12x12 + 12x5 ... f64: over
    with pytest.raises(sc.ShardRefused, match="allocate over 256 bytes"):
        run_data_shard(blob)
    monkeypatch.setenv("SCELLIS_PEER_MAX_BYTES", "lots")
    with pytest.raises(sc.SettingError, match="SCELLIS_PEER_MAX_BYTES='lots'"):
        run_data_shard(blob)
    monkeypatch.setenv("SCELLIS_PEER_MAX_BYTES", "1e6")
    out = open_result(run_data_shard(blob), shard_header(blob))
    np.testing.assert_allclose(out["y"], np.tanh(0.5 * (A @ A.T)), rtol=1e-12, atol=1e-14)


def test_altered_bytes_and_non_shards_are_refused():
    blob = _blob()
    with pytest.raises(sc.ShardRefused, match="content hash"):
        run_data_shard(craft(blob, _op("exp"), rehash=False))
    with pytest.raises(sc.ShardRefused, match="do not match its hash"):
        run_data_shard(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(sc.ShardRefused, match="truncated or forged"):
        run_data_shard(blob[:-8])
    with pytest.raises(sc.ShardRefused, match="does not start with"):
        run_data_shard(pickle.dumps(print))                         # a pickle is not a shard
    with pytest.raises(sc.ShardRefused, match="not bytes"):
        run_data_shard({"program": "anything"})


@pytest.fixture
def compromised(monkeypatch):
    """A kernel of the peer's interpreter replaced by one that tries an effect (a compromised op)."""
    def install(effect):
        orig = reference.KERNELS["tanh"]

        def evil(v, x, prog):
            effect()
            return orig(v, x, prog=prog)
        monkeypatch.setitem(reference.KERNELS, "tanh", evil)
    return install


def test_a_shard_cannot_open_a_file_on_the_peer(compromised, tmp_path):
    target = tmp_path / "pwned"
    compromised(lambda: open(target, "w").write("x"))
    with pytest.raises(sc.ShardRefused, match="attempted an effect \\(open") as e:
        run_data_shard(_blob())
    assert e.value.diagnostic.details["effect"] == "open" and not target.exists()
    compromised(lambda: open("/etc/hostname").read())
    with pytest.raises(sc.ShardRefused, match="open"):
        run_data_shard(_blob())
    open(tmp_path / "after", "w").close()                           # the guard is the shard's only: we may still


def test_a_shard_cannot_open_a_socket_or_import_on_the_peer(compromised):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    compromised(lambda: socket.create_connection(("127.0.0.1", port), timeout=1))
    with pytest.raises(sc.ShardRefused, match="socket"):
        run_data_shard(_blob())
    with pytest.raises(socket.timeout):
        listener.accept()                                           # nothing ever connected
    listener.close()
    compromised(lambda: __import__("xmlrpc.client"))
    with pytest.raises(sc.ShardRefused, match="import"):
        run_data_shard(_blob())


def test_on_a_pool_a_peer_refuses_the_effect_and_the_job_fails_closed(compromised, tmp_path):
    target = tmp_path / "pwned"
    compromised(lambda: open(target, "w"))
    with Pool(workers=2, processes=False, trust="open") as p:
        with pytest.raises(sc.RejectedResult, match="no 1 trustworthy"):
            p.run(Job(STATS, inputs={"items": [A]}, verify="reference", classification="public"))
    assert not target.exists()


def test_a_wrong_shape_or_stale_answer_is_rejected_structurally():
    blob = _blob()
    sent = shard_header(blob)
    good = run_data_shard(blob)
    assert set(open_result(good, sent)) == {"y", "s"}
    other = run_data_shard(STATS.encode(A, {"scale": 0.5}, stamp="t" * 32))
    with pytest.raises(sc.RejectedResult, match="stale"):
        open_result(other, sent)                                    # a replayed answer to another attempt
    # a forger with the right stamp and program hash, but the wrong shape: caught without re-execution
    head = {"format": FORMAT, "stamp": sent["stamp"], "program": sent["program"]["hash"], "outputs": []}
    wrong = _pack(RESULT_MAGIC, head, "outputs", [("0", np.zeros((3, 3))), ("1", np.zeros(5))])
    with pytest.raises(sc.RejectedResult, match=r"output 0 has shape \(3, 3\), the program declares \(12, 12\) f64"):
        open_result(wrong, sent)
    with pytest.raises(sc.RejectedResult, match="malformed"):
        open_result(b"garbage", sent)


def test_a_reduction_that_does_not_match_data_shards_is_a_diagnostic():
    ident = DataProgram(lambda x: F.mul(x, 1.0), name="ident")
    with Pool(processes=False, trust="open") as p:
        with pytest.raises(sc.PoolError, match="reduction 'mean' cannot combine"):
            p.run(Job(ident, inputs={"items": [np.ones(2), np.ones(3)]}, reduction="mean", verify="reference",
                      classification="public"))


class Bomb:
    """An object whose unpickling creates a file: what a hostile peer could hand a client that unpickles."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


class Hostile(WorkerPlugin):
    """On one worker, the first shard answer is swapped for a Bomb (a peer running a modified engine)."""

    name = "hostile"

    def __init__(self, bad: str, marker: str):
        self.bad, self.marker, self.done = bad, marker, False

    def setup(self, worker):
        self.worker = worker

    def transition(self, key, start, finish, **kw):
        if self.worker.address == self.bad and not self.done and finish == "memory" and str(key).startswith("shard-"):
            self.worker.data[key] = Bomb(self.marker)
            self.done = True


@pytest.mark.slow
def test_an_open_pool_of_processes_unpickles_nothing_a_peer_sends(tmp_path):
    marker = tmp_path / "unpickled-on-the-client"
    with Pool(workers=2, trust="open") as p:
        bad = p.workers()[0]
        p.client.register_plugin(Hostile(bad, str(marker)))
        r = p.run(Job(MM, inputs={"a": A, "b": B}, partitioner="row_blocks", partition={"blocks": 4},
                      reduction="concat_rows", verify="freivalds", classification="public"))
        assert p.quarantined == {bad}
    assert not marker.exists()                                     # the client never loaded the peer's object
    np.testing.assert_allclose(r.value, A @ B, rtol=1e-12, atol=1e-14)
    assert [w for _, w, _ in r.rejected] == [bad] and "msgpack" in r.rejected[0][2]
    assert not any(w == "reduction" for _, w, _ in r.rejected)      # the workers' tree agreed with the client's


def touch_unless(pid: int, marker: str) -> Exception:
    """Unpickling hook of HostileError: leaves a mark in any process but the peer's own."""
    import os
    if os.getpid() != pid:
        open(marker, "w").close()
    return RuntimeError("hostile")


class HostileError(Exception):
    def __init__(self, pid: int, marker: str):
        super().__init__("hostile")
        self.pid, self.marker = pid, marker

    def __reduce__(self):
        return (touch_unless, (self.pid, self.marker))


class ModifiedEngine(WorkerPlugin):
    """On one worker, the peer's engine is replaced by one whose shard runner raises a booby-trapped error."""

    name = "modified-engine"

    def __init__(self, bad: str, marker: str):
        self.bad, self.marker = bad, marker

    def setup(self, worker):
        if worker.address == self.bad:
            import os
            from scellis_jupyter.pool import datashard
            pid, marker = os.getpid(), self.marker

            def hostile(blob):
                raise HostileError(pid, marker)
            datashard.run_data_shard = hostile


@pytest.mark.slow
def test_a_peers_booby_trapped_error_is_not_loaded_on_the_client(tmp_path):
    marker = tmp_path / "error-unpickled-on-the-client"
    with Pool(workers=2, trust="open") as p:
        bad = p.workers()[0]
        p.client.register_plugin(ModifiedEngine(bad, str(marker)))
        r = p.run(Job(MM, inputs={"a": A, "b": B}, partitioner="row_blocks", partition={"blocks": 4},
                      reduction="concat_rows", verify="freivalds", classification="public"))
        assert p.quarantined == {bad}
    assert not marker.exists()
    assert r.rejected and all(w == bad and "not loaded" in reason for _, w, reason in r.rejected)
    np.testing.assert_allclose(r.value, A @ B, rtol=1e-12, atol=1e-14)


def _swap_collect():
    """On one worker process: another `collect` reducer (a different version of the catalog entry)."""
    from scellis_jupyter import catalog
    catalog.get("reducer", "collect")           # the built-in entries load on first use
    catalog.unregister("reducer", "collect")

    class Collect:                 # same results, other code: a peer on another release
        def leaf(self, index, result):
            return {index: result}

        def combine(self, a, b):
            return {**a, **b}

        def finish(self, acc):
            return [acc[k] for k in sorted(acc)]
    catalog.register("reducer", "collect", Collect, origin="another-release")
    return True


def test_reducer_hashes_name_the_catalog_entry():
    from scellis_jupyter.pool.pool import reducer_hash
    h = reducer_hash("collect")
    assert h == reducer_hash("collect") and len(h) == 64
    assert h != reducer_hash("concat_rows")


@pytest.mark.slow
def test_a_peer_whose_reducer_differs_is_named_and_the_client_reduces():
    job = {"inputs": {"a": A, "b": B}, "partitioner": "row_blocks", "partition": {"blocks": 3},
           "reduction": "collect", "verify": "freivalds", "classification": "public"}
    with Pool(workers=2, trust="open") as p:
        same = p.run(Job(MM, **job))                  # every worker has the client's entry: nothing to say
        assert not same.rejected
        odd = p.workers()[1]
        assert p.client.run(_swap_collect, workers=[odd]) == {odd: True}
        r = p.run(Job(MM, **job))
    np.testing.assert_allclose(np.concatenate(r.value), A @ B, rtol=1e-12, atol=1e-14)
    assert [w for i, w, why in r.rejected if "reducer 'collect'" in why] == [odd]
