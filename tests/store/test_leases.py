"""Writer leases: gc never deletes an object younger than the oldest live writer's lease, whatever
`--grace` says; a released lease, or one whose process is dead, no longer protects anything. The
concurrent test runs real writer processes beside a gc loop (bounded: about 3 s of writing)."""
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np

from scellis_jupyter.store import Store
from scellis_jupyter.store.leases import LEASES, live_leases


def _unnamed(store, v):
    """A collectable object nothing names yet: what a writer holds between writing and naming it."""
    return store.put_tensors({"w": np.full(16, v, np.float32)}, kind="checkpoint-weights")


def test_lease_keeps_unnamed_object_from_gc_grace_0(store):
    with store.lease():
        h = _unnamed(store, 1.0)
        rep = store.gc(grace_s=0)
        assert store.has(h) and h not in rep.freed_objects
        assert rep.kept_for_lease == 1 and rep.live_leases == 1
    assert not list((store.root / LEASES).iterdir())          # released: the file is gone
    rep = store.gc(grace_s=0)
    assert h in rep.freed_objects and not store.has(h)
    assert rep.kept_for_lease == 0 and rep.live_leases == 0


def test_lease_of_dead_process_is_ignored_and_removed(store):
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from scellis_jupyter.store import Store
        Store.open({str(store.root)!r}).lease()              # never released: the process just exits
        """)], cwd=os.getcwd(), env=dict(os.environ, PYTHONPATH=os.getcwd()), capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert len(list((store.root / LEASES).iterdir())) == 1
    h = _unnamed(store, 2.0)
    rep = store.gc(grace_s=0)
    assert h in rep.freed_objects and rep.live_leases == 0
    assert not list((store.root / LEASES).iterdir())          # gc dropped the dead lease


def test_expired_lease_is_ignored(store):
    lease = store.lease(expiry=5.0)
    old = time.time() - 60
    os.utime(lease.path, (old, old))                           # not refreshed for a minute
    assert live_leases(store.root) == []
    lease.release()


def test_running_run_holds_a_lease_until_it_ends(store):
    run = store.start_run(spec_hash="s")
    h = _unnamed(store, 3.0)
    assert store.gc(grace_s=0).kept_for_lease >= 1 and store.has(h)
    run.finish()
    assert h in store.gc(grace_s=0).freed_objects


_WRITER = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from scellis_jupyter.store import Store
    st, end, i, bad = Store.open(sys.argv[1]), time.time() + float(sys.argv[2]), 0, []
    while time.time() < end:
        with st.lease():
            h = st.put_tensors({"w": np.array([os.getpid(), i], np.int64)}, kind="checkpoint-weights")
            time.sleep(0.02)                       # written, not yet named: gc --grace 0 runs meanwhile
            try:
                st.set_ref(f"w-{os.getpid()}-{i}", h)
                st.get_tensors(h)
            except Exception as e:
                bad.append(str(e).splitlines()[0])
        i += 1
    print(i, len(bad), bad[:1])
    sys.exit(1 if bad or i == 0 else 0)
""")


def test_concurrent_writers_and_gc_grace_0(store, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    writers = [subprocess.Popen([sys.executable, str(script), str(store.root), "3"], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    gcs, deadline = 0, time.time() + 60
    while any(w.poll() is None for w in writers) and time.time() < deadline:
        store.gc(grace_s=0)
        gcs += 1
    outs = [w.communicate(timeout=30) for w in writers]
    assert gcs > 0
    assert [w.returncode for w in writers] == [0, 0, 0], outs
    names = [r["hash"] for r in store.index.refs()]
    assert names and all(store.has(h) for h in names)
    assert json.loads(json.dumps(store.gc(grace_s=0).to_json()))["live_leases"] == 0
