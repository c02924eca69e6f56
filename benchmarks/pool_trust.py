"""What trust costs: one matmul job (A @ B cut into row blocks) on a Pool of two in-process workers, as a
Python callable on an own pool, and as a data-only shard (Program IR + input bytes, run on the peer's
reference interpreter under the effect guard) on an own and an open pool; plus the per-shard cost of the
data path (encode, peer-side check/rebuild/compile/run, decode) against plain numpy. Prints a table.

    python benchmarks/pool_trust.py [--n 384] [--blocks 8] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

import numpy as np  # noqa: E402

from scellis_jupyter.graph import functional as F  # noqa: E402
from scellis_jupyter.pool import DataProgram, Job, Pool  # noqa: E402
from scellis_jupyter.pool.datashard import open_result, run_data_shard, shard_header  # noqa: E402


def matmul(p):
    return p["a"] @ p["b"]


MM = DataProgram(lambda a, b: F.matmul(a, b), name="matmul")


def best(fn, repeat):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return min(ts), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=384)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((a.n, a.n)), rng.standard_normal((a.n, a.n))
    want = A @ B
    rows = []
    block = {"a": A[: a.n // a.blocks], "b": B}
    t_np, _ = best(lambda: matmul(block), a.repeat * 5)
    t_enc, blob = best(lambda: MM.encode(block, {}, "s" * 32), a.repeat * 5)
    t_peer, ans = best(lambda: run_data_shard(blob), a.repeat * 5)
    sent = shard_header(blob)
    t_dec, _ = best(lambda: open_result(ans, sent), a.repeat * 5)
    print(f"one shard ({a.n // a.blocks}x{a.n} @ {a.n}x{a.n}, f64): numpy {t_np * 1e3:.2f} ms | data path: encode "
          f"{t_enc * 1e3:.2f} ms, peer {t_peer * 1e3:.2f} ms, decode {t_dec * 1e3:.2f} ms | shard {len(blob)} B")
    for trust, fn in [("own", matmul), ("own", MM), ("open", MM)]:
        with Pool(workers=2, processes=False, trust=trust) as p:
            for verify in ("reference", "freivalds"):
                job = Job(fn, inputs={"a": A, "b": B}, partitioner="row_blocks", partition={"blocks": a.blocks},
                          reduction="concat_rows", verify=verify, classification="public")
                p.run(job)                                   # warm
                t, r = best(lambda: p.run(job), a.repeat)
                err = float(np.max(np.abs(r.value - want)))
                rows.append((trust, "callable" if fn is matmul else "data shard", verify, t, err))
    print(f"\n{'trust':6} {'shard as':11} {'verify':10} {'job s':>8} {'max |err|':>10}")
    for trust, kind, verify, t, err in rows:
        print(f"{trust:6} {kind:11} {verify:10} {t:8.3f} {err:10.2e}")


if __name__ == "__main__":
    main()
